#!/usr/bin/env bash
# Installs what building and testing the `kafka` feature needs when it is missing, and nothing
# when it is there: Debian's packages for rdkafka's bundled librdkafka (built by cmake; Debian's
# own librdkafka 2.0.2 cannot talk to tansu), and `tansu`, the Kafka-compatible broker the tests
# talk to (../shared/SERVICES.md; about 10 minutes to build on 2 cores, once per machine).
# Fails loudly when it cannot.
set -euo pipefail

packages=(cmake libcurl4-openssl-dev libssl-dev libsasl2-dev zlib1g-dev chromium chromium-driver)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "prerequisites: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq || echo "prerequisites: apt-get update failed; trying the install anyway" >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v tansu > /dev/null; then
  echo "prerequisites: installing tansu (cargo install --locked --features dynostore tansu)"
  cargo install --locked --features dynostore tansu
fi
echo "prerequisites: $(tansu --version 2>/dev/null || echo tansu) and cmake $(cmake --version | head -1 | awk '{print $3}') present"
