"""First-party hook implementations, registered by entry point like any third party's."""
