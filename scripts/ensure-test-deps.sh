#!/usr/bin/env bash
# The tests start their own redis-server, disassemble the bundled pgvector with objdump and run
# it on an emulated CPU without AVX-512, and drive the admin console in headless Chromium: install
# the Debian packages redis-server, binutils, qemu-user, chromium and chromium-driver when they
# are missing.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v objdump >/dev/null 2>&1 || missing+=(binutils)
command -v qemu-x86_64 >/dev/null 2>&1 || missing+=(qemu-user)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
echo "installing ${missing[*]} (Debian packages) for the tests" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
