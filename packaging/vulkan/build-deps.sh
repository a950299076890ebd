#!/usr/bin/env bash
# What llama.cpp's Vulkan backend needs to build, and where it is: prints the CMake arguments to add (one line on
# stdout), or one line on stderr naming what is missing (exit 1). Called by the Makefile when CMAKE_ARGS asks for
# Vulkan (README, "iGPU"). Usage: build-deps.sh SDK_DIR
#   - glslc (shader compiler) and the Vulkan loader (libvulkan.so) from the system;
#   - Vulkan headers >= 1.3.272 (ggml-vulkan.cpp uses vk::LayerSettingEXT) and the SPIR-V headers: the system's
#     where new enough, else Debian 13's libvulkan-dev and spirv-headers, fetched with apt-get download through a
#     private apt configuration (the system's sources and lists are not touched) and unpacked into SDK_DIR, never
#     installed. Debian 12 ships 1.3.239.
# As root on a Debian-like system the Debian packages are installed first (mesa-vulkan-drivers carries the
# drivers for Intel and AMD iGPUs and lavapipe, the software device CI tests on).
set -euo pipefail
SDK=$(realpath -m "${1:?usage: build-deps.sh SDK_DIR}")
MIN_HEADER=272
HEADERS_SUITE=${HISHO_VULKAN_HEADERS_SUITE:-trixie}
DEBIAN_MIRROR=${HISHO_DEBIAN_MIRROR:-http://deb.debian.org/debian}

missing() { echo "Vulkan build: missing $1" >&2; exit 1; }

header_version() {  # VK_HEADER_VERSION of the vulkan_core.h under $1, or 0
    sed -n 's/^#define VK_HEADER_VERSION \([0-9]*\).*/\1/p' "$1/vulkan/vulkan_core.h" 2>/dev/null | head -1 | grep . \
        || echo 0
}

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        glslc libvulkan-dev libvulkan1 mesa-vulkan-drivers spirv-headers >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 || true
             DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                 glslc libvulkan-dev libvulkan1 mesa-vulkan-drivers spirv-headers >/dev/null 2>&1 || true; }
fi

command -v glslc >/dev/null 2>&1 \
    || missing "glslc, the shader compiler (Debian/Ubuntu: apt-get install glslc; Fedora: dnf install glslc)"
# The loader cache is read whole before it is searched: `ldconfig -p | grep -q` under pipefail fails when grep's
# early exit kills ldconfig with SIGPIPE, which happens as soon as the cache is larger than a pipe's buffer.
loader_cache=$(ldconfig -p 2>/dev/null || true)
loader_found=
case $loader_cache in *libvulkan.so\ *) loader_found=1 ;; esac
# Where the loader's file lies when the cache cannot be read (no ldconfig on PATH, as for most users on Debian).
# HISHO_VULKAN_LOADER_FILES replaces the list (the test uses it to check the cache alone).
for lib in ${HISHO_VULKAN_LOADER_FILES:-/usr/lib/libvulkan.so /usr/lib64/libvulkan.so /usr/lib/*-linux-gnu/libvulkan.so /lib/*-linux-gnu/libvulkan.so}; do
    if [ -e "$lib" ]; then loader_found=1; fi
done
[ -n "$loader_found" ] \
    || missing "the Vulkan loader libvulkan (Debian/Ubuntu: apt-get install libvulkan-dev; Fedora: vulkan-loader-devel)"

system_include=/usr/include
if [ "$(header_version "$system_include")" -ge "$MIN_HEADER" ] && [ -e "$system_include/spirv/unified1/spirv.hpp" ]
then
    echo ""  # the system's headers do: nothing to add
    exit 0
fi

include="$SDK/usr/include"
if [ "$(header_version "$include")" -lt "$MIN_HEADER" ] || [ ! -e "$include/spirv/unified1/spirv.hpp" ]; then
    command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
        || missing "Vulkan headers >= 1.3.$MIN_HEADER and SPIR-V headers (system: 1.3.$(header_version "$system_include"); install your distribution's Vulkan and SPIR-V headers packages)"
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -e "$keyring" ] || missing "Vulkan headers >= 1.3.$MIN_HEADER (and $keyring to fetch Debian's)"
    apt_dir="$SDK/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts" "$apt_dir/debs"
    echo "deb [signed-by=$keyring] $DEBIAN_MIRROR $HEADERS_SUITE main" > "$apt_dir/sources.list"
    opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=$apt_dir/parts"
          -o "Dir::Etc::preferencesparts=$apt_dir/parts" -o "Dir::State::Lists=$apt_dir/lists"
          -o "Dir::Cache=$apt_dir/cache" -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
    echo "Vulkan build: system headers 1.3.$(header_version "$system_include") too old; fetching Debian $HEADERS_SUITE's libvulkan-dev and spirv-headers into $SDK" >&2
    apt-get "${opts[@]}" -qq update >/dev/null 2>&1 \
        || missing "Vulkan headers >= 1.3.$MIN_HEADER (could not read Debian $HEADERS_SUITE's package list from $DEBIAN_MIRROR)"
    (cd "$apt_dir/debs" && rm -f ./*.deb && apt-get "${opts[@]}" -qq download libvulkan-dev spirv-headers >/dev/null 2>&1) \
        || missing "Vulkan headers >= 1.3.$MIN_HEADER (could not download Debian $HEADERS_SUITE's libvulkan-dev and spirv-headers)"
    for deb in "$apt_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$SDK"; done
    [ "$(header_version "$include")" -ge "$MIN_HEADER" ] || missing "Vulkan headers >= 1.3.$MIN_HEADER (Debian $HEADERS_SUITE's are older)"
fi
# Vulkan_INCLUDE_DIR makes FindVulkan use these headers; the SPIR-V headers sit beside them, so the same -I puts
# them before the system's older ones.
echo "-DVulkan_INCLUDE_DIR=$include"
