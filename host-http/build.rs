//! Embeds the version of the compiled-in time-zone database for `--version`.

fn main() {
    println!(
        "cargo:rustc-env=CHECKOUT_TZDB_VERSION={}",
        chrono_tz::IANA_TZDB_VERSION
    );
}
