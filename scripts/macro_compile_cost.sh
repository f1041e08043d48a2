#!/usr/bin/env bash
# Compile cost of #[consumer]: a crate with 100 annotated handlers against the same 100 plain
# async functions. Dependencies are built once first; each measurement rebuilds only the fixture
# crate (touching its source), three times, and the median is reported.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${TMPDIR:-/tmp}/delivery-compile-cost
rm -rf "$work" && mkdir -p "$work"

make_crate() { # name annotate(0/1)
  local dir=$work/$1
  mkdir -p "$dir/src"
  cat > "$dir/Cargo.toml" <<TOML
[package]
name = "$1"
version = "0.0.0"
edition = "2024"
publish = false
[workspace]
[dependencies]
delivery = { path = "$root" }
serde = { version = "1", features = ["derive"] }
TOML
  {
    echo '#![allow(dead_code)]'
    echo 'use delivery::{HandlerError, Json, State, UnitId, DeliveryCount};'
    echo '#[derive(Clone, Default)] pub struct App { pub rows: std::sync::Arc<std::sync::Mutex<Vec<(String, u64)>>> }'
    echo '#[derive(serde::Deserialize)] pub struct Event { pub id: String, pub amount: u64 }'
    for i in $(seq 1 100); do
      [[ $2 == 1 ]] && echo '#[delivery::consumer]'
      cat <<RS
pub async fn handler_$i(State(app): State<App>, Json(event): Json<Event>, unit: UnitId, count: DeliveryCount) -> Result<(), HandlerError> {
    if count.get() > 3 && unit.as_str().is_empty() { return Err(HandlerError::reject("empty id")); }
    app.rows.lock().unwrap().push((format!("{}-$i", event.id), event.amount + $i));
    Ok(())
}
RS
    done
  } > "$dir/src/lib.rs"
}

measure() { # name
  local dir=$work/$1 times=()
  (cd "$dir" && CARGO_TARGET_DIR=$work/target cargo build --quiet 2>/dev/null)
  for _ in 1 2 3; do
    touch "$dir/src/lib.rs"
    local start=$(date +%s.%N)
    (cd "$dir" && CARGO_TARGET_DIR=$work/target cargo build --quiet)
    times+=("$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.2f", a - b }')")
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n 2p
}

make_crate plain 0
make_crate annotated 1
plain=$(measure plain)
annotated=$(measure annotated)
echo "cargo build of the fixture crate alone (dependencies prebuilt), median of 3:"
echo "  100 plain async fns:            ${plain} s"
echo "  100 #[consumer] handlers:       ${annotated} s"
echo "  ratio annotated / plain:        $(awk -v a="$annotated" -v p="$plain" 'BEGIN { printf "%.2f", a / p }')"
