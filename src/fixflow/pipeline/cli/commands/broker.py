"""`fixflow broker start|stop|status [--conf FILE]`: the embedded development Kafka broker."""

from __future__ import annotations

import argparse
import sys

from fixflow.pipeline.config import ConfigError, add_conf_argument, config_from_args

HELP = "start/stop/status of the embedded development Kafka broker"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("start", "stop", "status"), help="what to do")
    parser.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="how long `start` waits for the broker to answer (default 20)",
    )
    add_conf_argument(parser)


def run(args: argparse.Namespace) -> int:
    from fixflow.pipeline.broker.embedded import broker_status, start_broker, stop_broker
    from fixflow.pipeline.broker.processes import BrokerError

    try:
        config = config_from_args(args)
        if args.action == "start":
            if not config.kafka.embedded:
                print(
                    f"fixflow broker: [kafka] embedded = false in {config.source}; "
                    f"use the broker at {config.kafka.bootstrap_servers}",
                    file=sys.stderr,
                )
                return 2
            status = start_broker(config, timeout=args.timeout)
        elif args.action == "stop":
            status = stop_broker(config)
        else:
            status = broker_status(config)
    except (ConfigError, BrokerError) as error:
        print(f"fixflow broker: {error}", file=sys.stderr)
        return 1
    print(status.message)
    if args.action == "status":
        return 0 if status.running else 3
    return 0
