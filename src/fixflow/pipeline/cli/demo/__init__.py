"""Programs and facts bundled for `fixflow demo`."""
