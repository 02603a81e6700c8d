//! What the tests of several znippy crates share, so that it is written once:
//! deterministic test data (`data.rs`: compressible text and incompressible
//! noise), the mutation fuzzer (`fuzz.rs`) that the format crate's reader
//! and tar fuzzers and the CLI's undo-file fuzzer run on, a SeaweedFS
//! server on loopback (`seaweed.rs`) for the object-storage tests, and a
//! test PKI with openssl's CMS verifier (`pki.rs`) for the signing tests.

pub mod data;
pub mod fuzz;
pub mod pki;
pub mod seaweed;
