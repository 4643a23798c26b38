"""What several test files share: apps on the fake backend, the command line's assertions, tiny models, probe references."""
