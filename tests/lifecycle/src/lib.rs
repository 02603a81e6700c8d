//! Lifecycle tests live in `tests/`: create, append, restart, replace and
//! delete, seal, both in one process and across killed processes.
