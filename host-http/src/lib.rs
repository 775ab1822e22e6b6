//! Library of the checkout-server host.
