//! No library: the tests in tests/ are the crate.
