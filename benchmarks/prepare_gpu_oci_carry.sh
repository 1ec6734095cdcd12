#!/bin/bash
# Fill what benchmarks/device_gpu_containers.sh needs on a lent GPU host that has no container
# runtime and no internet, from this (Debian 12) host; run from the repository root:
#
#   .gpuoci/bin/{runc,crun}  this host's runtimes, their RPATH set to /tmp/isobench-gpuoci/lib
#   .gpuoci/lib/             the shared libraries they need beyond glibc (ldd), copied there by
#                            the device script. An RPATH, not LD_LIBRARY_PATH in a wrapper: runc
#                            re-executes itself (`runc init`, from a memfd copy) with an
#                            environment of its own, so a wrapper's variable would not reach it,
#                            and $ORIGIN means nothing for a memfd. The host's python is untouched.
#   .whl/                    wheels for Python 3.12 of what isobench imports that the GPU host
#                            lacks (pydantic and its dependencies), the versions of constraints.txt
#
# Both folders are added to .git/info/exclude. Needs patchelf (apt-get install patchelf).
set -euo pipefail
cd "$(dirname "$0")/.."
LIBDIR=/tmp/isobench-gpuoci/lib   # where the device script puts .gpuoci/lib

rm -rf .gpuoci .whl
mkdir -p .gpuoci/bin .gpuoci/lib .whl
for tool in runc crun; do
    path=$(command -v "$tool")
    cp -L "$path" ".gpuoci/bin/$tool"
    # every library but glibc's own (the GPU host's newer glibc serves; these need GLIBC_2.34 at most)
    ldd "$path" | awk '/=>/ {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
        while read -r lib; do cp -L "$lib" .gpuoci/lib/; done
    patchelf --force-rpath --set-rpath "$LIBDIR" ".gpuoci/bin/$tool"
done
chmod 755 .gpuoci/bin/*

version() { grep -i -E "^$1==" constraints.txt | head -1 | cut -d= -f3; }
for name in pydantic pydantic_core annotated-types typing-inspection typing_extensions; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d .whl "$name==$(version "$name")"
done

exclude=.git/info/exclude
for entry in /.gpuoci/ /.whl/ /.site/; do
    grep -qxF "$entry" "$exclude" 2>/dev/null || echo "$entry" >> "$exclude"
done
ls -l .gpuoci/bin .gpuoci/lib .whl
du -shc .gpuoci .whl | tail -1
