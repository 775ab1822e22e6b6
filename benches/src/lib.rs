//! Inputs shared by the criterion benchmarks.
