//! checkout-server binary.
fn main() {}
