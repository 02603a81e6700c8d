//! What the tests of several znippy crates share, so that it is written once:
//! deterministic test data (`data.rs`: compressible text and incompressible
//! noise), and the mutation fuzzer (`fuzz.rs`) that the format crate's reader
//! and tar fuzzers and the CLI's undo-file fuzzer run on.

pub mod data;
pub mod fuzz;
