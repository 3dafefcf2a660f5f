"""The pure core: the spec, the law, the replica planner, GPU profiles, manifests and queries. No I/O."""
