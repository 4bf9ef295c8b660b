"""One module per `fixflow` subcommand (see ``fixflow.pipeline.cli``)."""
