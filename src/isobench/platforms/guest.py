"""The guest a VM cell boots: a distribution kernel and a small initramfs isobench builds.

The kernel is Debian's ``linux-image-*-amd64`` (fetched with ``apt-get download`` and
unpacked, never installed) or a kernel the user names. The initramfs holds busybox, the
kernel modules the guest needs (from the *guest* kernel's package, in dependency order)
and ``/init``: it mounts the guest's root over 9p (the host mirror only, never the host's
``/``: see :mod:`isobench.platforms.guestroot`), runs the cell's job inside it with the
host's own interpreter, reports on a control port and powers off. Everything is
cached under ``<cache>/vm`` by content hash and rebuilt when an input changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from isobench.hostinfo import cache_root

#: modules /init loads (with their dependencies), when the kernel has them as modules
GUEST_MODULES = ("virtio_pci", "virtio_mmio", "virtio_console", "9pnet_virtio", "9p", "virtio_rng")
#: virtio-serial port names: records (the worker's stdout) and the control lines of /init
RECORDS_PORT = "isobench.records"
CONTROL_PORT = "isobench.control"
INITRAMFS_FORMAT = 3  # bump when the layout below changes

# The guest's PID 1. Control lines (host-timestamped by the platform): `boot` when /init
# starts, `ready` with what the guest has just before the job runs, `exit N` after it.
INIT_SCRIPT = r"""#!/bin/busybox sh
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
CMDLINE=$(cat /proc/cmdline)
# busybox insmod does not read module options from the kernel command line: pass them.
while read -r ko; do
  name=$(basename "$ko" .ko); name=$(echo "$name" | tr - _); opts=""
  for word in $CMDLINE; do
    case "$word" in "$name".*) opts="$opts ${word#"$name".}" ;; esac
  done
  insmod "/lib/modules/$ko" $opts 2>/dev/null
done < /modules.list
port() {
  for i in $(seq 1 200); do
    for p in /sys/class/virtio-ports/*; do
      [ "$(cat "$p/name" 2>/dev/null)" = "$1" ] && echo "/dev/${p##*/}" && return 0
    done
    sleep 0.01
  done
  return 1
}
CTL=$(port __CONTROL__) || { echo "isobench: no control port" > /dev/console; poweroff -f; }
REC=$(port __RECORDS__)
echo "boot $(cut -d' ' -f1 /proc/uptime)" > "$CTL"
fail() { echo "isobench: $*" > /dev/console; echo "exit 125 $*" > "$CTL"; poweroff -f; }
mkdir -p /host /job
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288 job /job || fail "cannot mount the job share"
. /job/guest.env
mount -t "$ISOBENCH_ROOTFS" -o "$ISOBENCH_ROOTFS_OPTS" host /host || fail "cannot mount the host root"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/shm /host/dev/pts
mount -t tmpfs -o mode=1777 shm /host/dev/shm
mount -t devpts devpts /host/dev/pts
# Fresh /tmp and /run for the guest, but host paths under them that the job needs (a project or
# virtual environment cloned under /tmp) stay visible: keep a view of the originals, bind them back.
mkdir -p /keep/tmp /keep/run
mount -o bind /host/tmp /keep/tmp
mount -o bind /host/run /keep/run
mount -t tmpfs -o mode=1777 tmp /host/tmp
mount -t tmpfs -o mode=755 run /host/run
for keep in $ISOBENCH_KEEP; do
  mkdir -p "/host$keep" && mount -o bind "/keep$keep" "/host$keep" || fail "cannot keep $keep visible"
done
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup 2>/dev/null
mkdir -p /host/run/isobench-job
cp /job/* /host/run/isobench-job/
echo "ready $(cut -d' ' -f1 /proc/uptime) nproc=$(grep -c ^processor /proc/cpuinfo) memtotal_kb=$(awk '/^MemTotal/{print $2}' /proc/meminfo) kernel=$(uname -r)" > "$CTL"
chroot /host /bin/sh /run/isobench-job/run.sh > "$REC" 2> /dev/console < /dev/null
echo "exit $?" > "$CTL"
poweroff -f
"""


@dataclass(frozen=True)
class GuestImage:
    kernel: Path
    initrd: Path
    kernel_version: str
    source: str  # "debian <package version>" or "user"


def vm_cache() -> Path:
    path = cache_root() / "vm"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def debian_kernel_package() -> str | None:
    """The versioned package behind ``linux-image-amd64`` (or the host arch's flavour)."""
    meta = _meta_package()
    try:
        out = subprocess.run(["apt-cache", "depends", meta], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.stdout.splitlines():
        match = re.match(r"\s*Depends:\s*(linux-image-\S+)", line)
        if match:
            return match.group(1)
    return None


def _meta_package() -> str:
    machine = os.uname().machine
    return {"x86_64": "linux-image-amd64", "aarch64": "linux-image-arm64"}.get(machine, "linux-image-amd64")


def cached_debian_kernel() -> Path | None:
    """The unpacked Debian kernel tree already in the cache (newest), if any."""
    trees = sorted((vm_cache() / "kernels").glob("*/.complete")) if (vm_cache() / "kernels").is_dir() else []
    return trees[-1].parent if trees else None


def fetch_debian_kernel() -> Path:
    """Download and unpack the distribution kernel once; return the unpacked tree.

    Only the package file is fetched (``apt-get download``); nothing is installed on the host.
    An already unpacked tree is reused without touching the network.
    """
    package = debian_kernel_package()
    if package is None:
        cached = cached_debian_kernel()
        if cached:
            return cached
        raise RuntimeError(f"apt-cache knows no {_meta_package()}: give a kernel with options.kernel")
    tree = vm_cache() / "kernels" / package
    if (tree / ".complete").exists():
        return tree
    downloads = vm_cache() / "debs"
    downloads.mkdir(parents=True, exist_ok=True)
    debs = sorted(downloads.glob(f"{package}_*.deb"))
    if not debs:
        out = subprocess.run(["apt-get", "download", package], cwd=downloads, capture_output=True,
                             text=True, timeout=900)
        debs = sorted(downloads.glob(f"{package}_*.deb"))
        if out.returncode != 0 or not debs:
            raise RuntimeError(f"apt-get download {package} failed: {out.stderr.strip()[-300:]}")
    tmp = tree.with_name(f".{package}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(tmp)], check=True, capture_output=True, timeout=600)
    for version_dir in (tmp / "lib" / "modules").iterdir():
        # The package ships no module index (depmod runs at install): build it in the cache.
        subprocess.run(["depmod", "-b", str(tmp), version_dir.name], check=True, capture_output=True,
                       timeout=300)
    (tmp / ".complete").write_text(debs[-1].name + "\n")
    shutil.rmtree(tree, ignore_errors=True)
    tmp.rename(tree)
    return tree


def kernel_version_of(kernel: Path) -> str | None:
    """The release string inside an x86 bzImage header (``None`` when it is not one)."""
    try:
        with kernel.open("rb") as handle:
            header = handle.read(0x220)
            if header[0x202:0x206] != b"HdrS":
                return None
            offset = int.from_bytes(header[0x20E:0x210], "little") + 0x200
            handle.seek(offset)
            text = handle.read(256).split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return None
    return text.split()[0] if text else None


def pvh_kernel(bz_image: Path) -> Path:
    """The uncompressed ELF inside an xz/gzip bzImage when it has a PVH entry, else the bzImage.

    QEMU boots such an ELF at its PVH entry point: no decompression inside the guest, which
    under TCG emulation halves the boot. Cached next to the cache's other VM files.
    """
    digest = _sha256(bz_image)[:16]
    target = vm_cache() / "vmlinux" / digest
    if target.exists():
        return target
    marker = target.with_suffix(".none")
    if marker.exists():
        return bz_image
    elf = _decompress_payload(bz_image.read_bytes())
    target.parent.mkdir(parents=True, exist_ok=True)
    if elf is None or not _has_pvh_note(elf):
        marker.write_text("no PVH ELF inside\n")
        return bz_image
    tmp = target.with_name(f".{digest}.{os.getpid()}")
    tmp.write_bytes(elf)
    tmp.rename(target)
    return target


def _decompress_payload(image: bytes) -> bytes | None:
    import lzma
    import zlib

    for magic, make in ((b"\xfd7zXZ\x00", lambda: lzma.LZMADecompressor()),
                        (b"\x1f\x8b\x08", lambda: zlib.decompressobj(31))):
        offset = image.find(magic)
        while offset >= 0:
            try:
                out = make().decompress(image[offset:])
                if out[:4] == b"\x7fELF":
                    return out
            except (lzma.LZMAError, zlib.error):
                pass
            offset = image.find(magic, offset + 1)
    return None


def _has_pvh_note(elf: bytes) -> bool:
    """True when a PT_NOTE segment holds Xen's PHYS32_ENTRY note (type 18), the PVH entry."""
    import struct

    if elf[4] != 2:  # 64-bit only
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for index in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + index * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, note_type = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and note_type == 18:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def module_files(modules_root: Path, version: str) -> list[Path]:
    """The ``.ko`` files of GUEST_MODULES and their dependencies, in load order (built-ins skipped)."""
    ordered: list[Path] = []
    for module in GUEST_MODULES:
        out = subprocess.run(["modprobe", "-d", str(modules_root), "-S", version, "--show-depends", module],
                             capture_output=True, text=True, timeout=60)
        for line in out.stdout.splitlines():
            parts = line.split()
            if parts[:1] == ["insmod"]:
                path = Path(parts[1])
                if path not in ordered:
                    ordered.append(path)
    return ordered


def _busybox() -> Path:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        if path.exists():
            return path.resolve()
    found = shutil.which("busybox")
    if not found:
        raise RuntimeError("busybox is not installed (apt-get install busybox-static)")
    return Path(found).resolve()


def _is_static(binary: Path) -> bool:
    out = subprocess.run(["file", "-b", str(binary)], capture_output=True, text=True) if shutil.which("file") \
        else None
    if out is not None:
        return "statically linked" in out.stdout or "static-pie" in out.stdout
    return b"/lib64/ld-linux" not in binary.read_bytes()[:65536]


def init_script() -> str:
    return INIT_SCRIPT.replace("__CONTROL__", CONTROL_PORT).replace("__RECORDS__", RECORDS_PORT)


def build_initramfs(modules_root: Path | None, version: str | None) -> Path:
    """Build (once per content hash) the initramfs: busybox, /init and the guest modules."""
    busybox = _busybox()
    if not _is_static(busybox):
        raise RuntimeError(f"{busybox} is not statically linked (apt-get install busybox-static)")
    modules = module_files(modules_root, version) if modules_root and version else []
    digest = hashlib.sha256(json.dumps({
        "format": INITRAMFS_FORMAT, "init": init_script(), "busybox": _sha256(busybox),
        "modules": [[p.name, _sha256(p)] for p in modules]}, sort_keys=True).encode()).hexdigest()[:16]
    target = vm_cache() / "initramfs" / f"{digest}.cpio"
    if target.exists():
        return target
    if shutil.which("cpio") is None:
        raise RuntimeError("cpio is not installed (apt-get install cpio)")
    stage = target.with_name(f".{digest}.stage-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    for directory in ("bin", "dev", "proc", "sys", "lib/modules", "host", "job"):
        (stage / directory).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, stage / "bin" / "busybox")
    (stage / "bin" / "sh").symlink_to("busybox")
    listing = []
    for module in modules:
        shutil.copy2(module, stage / "lib" / "modules" / module.name)
        listing.append(module.name)
    (stage / "modules.list").write_text("".join(f"{name}\n" for name in listing))
    (stage / "init").write_text(init_script())
    (stage / "init").chmod(0o755)
    names = subprocess.run(["find", "."], cwd=stage, capture_output=True, text=True, check=True).stdout
    tmp = target.with_name(f".{digest}.cpio-{os.getpid()}")
    with tmp.open("wb") as out:
        subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=stage, input=names.encode(), stdout=out,
                       check=True, timeout=120)
    tmp.rename(target)
    shutil.rmtree(stage, ignore_errors=True)
    return target


#: where no kernel image lives but secrets and device files do: `options.kernel` may not point there
_NOT_KERNEL_DIRS = ("/etc", "/root", "/proc", "/sys", "/dev", "/run", "/var/lib", "/home")


def kernel_problem(path: str) -> str | None:
    """Why ``options.kernel`` cannot be a kernel image to boot, or None. QEMU runs as root and reads
    the file: a path to /etc/shadow or a device must be refused before anything opens it."""
    import stat

    if not isinstance(path, str) or not os.path.isabs(path):
        return "is not an absolute path"
    real = os.path.realpath(path)
    if any(real == d or real.startswith(d + "/") for d in _NOT_KERNEL_DIRS):
        return f"resolves to {real}, under a directory that holds secrets or devices, not kernel images"
    try:
        info = os.stat(real)
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if not info.st_mode & stat.S_IROTH:
        return "is not world-readable, as a kernel image is"
    with open(real, "rb") as fh:
        head = fh.read(0x210)
    if not (head.startswith(b"\x7fELF") or head[0x202:0x206] == b"HdrS"):
        return "is not a Linux kernel image (no bzImage header, no ELF magic)"
    return None


def guest_image(kernel_option: str | None = None, modules_option: str | None = None,
                download: bool = True) -> GuestImage:
    """The kernel and initramfs for a cell: the user's kernel, or Debian's (fetched once)."""
    if kernel_option:
        kernel = Path(kernel_option)
        problem = kernel_problem(kernel_option)
        if problem:
            raise RuntimeError(f"options.kernel: {kernel} {problem}")
        version = kernel_version_of(kernel) or "unknown"
        modules_root = Path(modules_option) if modules_option else Path("/")
        has_modules = (modules_root / "lib" / "modules" / version).is_dir()
        initrd = build_initramfs(modules_root if has_modules else None, version if has_modules else None)
        return GuestImage(pvh_kernel(kernel), initrd, version, "user")
    tree = fetch_debian_kernel() if download else cached_debian_kernel()
    if tree is None:
        raise RuntimeError("the guest kernel is not downloaded yet (run `./isobench.sh setup`)")
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise RuntimeError(f"{tree} holds no boot/vmlinuz-*")
    version = kernels[-1].name.removeprefix("vmlinuz-")
    initrd = build_initramfs(tree, version)
    package = (tree / ".complete").read_text().strip()
    return GuestImage(pvh_kernel(kernels[-1]), initrd, version, f"debian {package}")
