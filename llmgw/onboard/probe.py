"""The node probe: a stdlib-only script ``llmgw node add`` uploads and runs with the node's python3.

It gathers the facts the doctor's checks need and prints them as one JSON
object; the control plane builds the facts and runs the checks. It must run
on any python3 the node has (3.6 and later), so that a node with too old a
Python is told so rather than shown a traceback: no f-strings with ``=``, no
walrus, no imports outside the standard library.

``LLMGW_PROBE_ROOT`` prefixes the files read (os-release, /proc, /run/systemd):
for tests and for probing a container's root from outside.
"""

import glob
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.environ.get("LLMGW_PROBE_ROOT", "")
LIBSTDCXX_GLOBS = (
    "/usr/lib/*-linux-gnu/libstdc++.so.6",
    "/usr/lib64/libstdc++.so.6",
    "/lib64/libstdc++.so.6",
    "/usr/lib/libstdc++.so.6",
    "/lib/*-linux-gnu/libstdc++.so.6",
)
PACKAGE_MANAGERS = ("apt-get", "dnf", "yum", "zypper")


def _read(path):
    try:
        with open(ROOT + path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def os_release():
    out = {}
    text = _read("/etc/os-release") or _read("/usr/lib/os-release")
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip().strip("\"'")
    return out


def cpu():
    flags = []
    for line in _read("/proc/cpuinfo").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags = value.split()
            break
    mem = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
    return {"cpu_flags": flags, "cpu_count": os.cpu_count() or 0, "memory_total_bytes": mem}


def nvidia():
    text = _read("/proc/driver/nvidia/version")
    found = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
    out = {
        "nvidia_driver_version": found.group(1) if found else "",
        "nvidia_open_kernel_module": "Open Kernel Module" in text,
        "gpus": [],
    }
    smi = shutil.which("nvidia-smi")
    if found and smi:
        try:
            # Spelled for Python 3.6, which has neither capture_output nor text.
            res = subprocess.run(  # noqa: UP022
                [smi, "--query-gpu=name,memory.total,uuid", "--format=csv,noheader,nounits"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                universal_newlines=True,  # noqa: UP021
                timeout=20,
            )
        except (OSError, subprocess.SubprocessError):
            return out
        for line in res.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 3 and parts[1].isdigit():
                out["gpus"].append(
                    {
                        "name": parts[0],
                        "memory_total_bytes": int(parts[1]) * 1024 * 1024,
                        "uuid": parts[2],
                    }
                )
    return out


def libstdcxx():
    for pattern in LIBSTDCXX_GLOBS:
        for path in sorted(glob.glob(pattern)):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            found = {m.decode() for m in re.findall(rb"GLIBCXX_(\d+\.\d+(?:\.\d+)?)", data)}
            return {"libstdcxx_path": path, "glibcxx_versions": sorted(found, key=_key)}
    return {"libstdcxx_path": "", "glibcxx_versions": []}


def _key(version):
    return [int(p) for p in version.split(".")]


def disk(path):
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        st = os.statvfs(probe or "/")
    except OSError:
        return {"disk_path": probe, "disk_free_bytes": 0}
    return {"disk_path": probe, "disk_free_bytes": st.f_bavail * st.f_frsize}


def reach(addresses, timeout_s):
    out = []
    for addr in addresses:
        host, _, port = addr.rpartition(":")
        host = host.strip("[]")
        entry = {"address": addr, "ok": False, "error": ""}
        try:
            started = time.monotonic()
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
            entry["ok"] = True
            entry["ms"] = round((time.monotonic() - started) * 1000, 1)
        except TimeoutError:
            entry["error"] = f"no answer within {timeout_s:g} s"
        except (OSError, ValueError) as e:
            entry["error"] = getattr(e, "strerror", None) or str(e)
        out.append(entry)
    return out


def main(argv):
    data_dir, addresses, timeout_s = "/", [], 3.0
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag == "--data-dir":
            data_dir = args.pop(0)
        elif flag == "--control-plane":
            addresses.append(args.pop(0))
        elif flag == "--timeout":
            timeout_s = float(args.pop(0))
    glibc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else ""
    facts = {
        "probe_version": 1,
        "hostname": socket.gethostname(),
        "uid": os.geteuid(),
        "python_version": list(sys.version_info[:3]),
        "python_path": sys.executable,
        "os_release": os_release(),
        "arch": platform.machine(),
        "kernel": platform.release(),
        "glibc_version": glibc.split()[-1] if glibc and glibc.startswith("glibc") else "",
        "systemd": os.path.isdir(ROOT + "/run/systemd/system"),
        "package_managers": [m for m in PACKAGE_MANAGERS if shutil.which(m)],
        "reach": reach(addresses, timeout_s),
    }
    facts.update(cpu())
    facts.update(nvidia())
    facts.update(libstdcxx())
    facts.update(disk(data_dir))
    # Last, so the clock is read as close to the end of the round trip as can be.
    facts["time"] = time.time()
    sys.stdout.write(json.dumps(facts) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
