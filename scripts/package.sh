#!/usr/bin/env bash
# Builds the Debian package of Freeway: the release binary, its manual pages and shell
# completions (generated from the command line itself), the systemd unit and an example
# configuration. Needs cargo-deb (`cargo install cargo-deb`). Prints the .deb's path.
#   scripts/package.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--no-build" ]; then
    cargo build --release -p freeway
fi
bin=target/release/freeway
assets=target/package-assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" manpages "$assets/man"
"$bin" completions bash > "$assets/completions/freeway.bash"
"$bin" completions zsh > "$assets/completions/_freeway"
"$bin" completions fish > "$assets/completions/freeway.fish"
"$bin" default-config > "$assets/freeway.toml.example"
"$bin" default-config --router > "$assets/router.toml.example"
cargo deb -p freeway --no-build --no-strip --quiet | tail -1
