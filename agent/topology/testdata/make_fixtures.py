#!/usr/bin/env python3
"""Writes the recorded sysfs trees and CUDA/NVML answers under testdata/.

Run from agent/topology/testdata: `python3 make_fixtures.py`. The output is
checked in; this script documents how it was made and regenerates it.

Conventions (see README.md): ':' in a file or directory name is written as
'%3A' (Bazel labels cannot contain ':'), and a symlink NAME is written as a
file NAME.link holding the link target. sysfs_fixture.cc turns a tree back
into a real one (real names, real symlinks) under TEST_TMPDIR.
"""
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))


def esc(path):
    return path.replace(":", "%3A")


class Tree:
    def __init__(self, root):
        self.root = root
        shutil.rmtree(root, ignore_errors=True)

    def file(self, rel, text):
        path = os.path.join(self.root, esc(rel))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")

    def link(self, rel, target):
        self.file(rel + ".link", target)

    def pci_device(self, host_bridge, chain, numa):
        """chain: bridges from the root port down to the device (last)."""
        path = "/".join(["devices", host_bridge] + chain)
        self.file(path + "/numa_node", str(numa))
        self.link("bus/pci/devices/" + chain[-1],
                  "../../../" + path)
        return path

    def ib_port(self, dev_path, name, rate, state="4: ACTIVE",
                phys="5: LinkUp", layer="InfiniBand", port=1):
        base = dev_path + "/infiniband/" + name
        addr = dev_path.split("/")[-1]
        self.link(base + "/device", "../../../" + addr)
        p = base + "/ports/%d/" % port
        if rate is not None:
            self.file(p + "rate", rate)
        if state is not None:
            self.file(p + "state", state)
        if phys is not None:
            self.file(p + "phys_state", phys)
        if layer is not None:
            self.file(p + "link_layer", layer)
        self.link("class/infiniband/" + name, "../../" + base)

    def cpus(self, node_cpulists, node_mem_kb, online, package_of_cpu):
        for node, cpulist in enumerate(node_cpulists):
            d = "devices/system/node/node%d/" % node
            self.file(d + "cpulist", cpulist)
            self.file(d + "meminfo",
                      "Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB"
                      % (node, node_mem_kb, node, node_mem_kb // 2))
        self.file("devices/system/cpu/online", online)
        # Trimmed recording: one CPU per (socket, hyperthread half) is enough to
        # count packages; the logical CPU count comes from cpu/online.
        for cpu, package in package_of_cpu.items():
            self.file("devices/system/cpu/cpu%d/topology/physical_package_id" % cpu,
                      str(package))


def write(path, text):
    with open(os.path.join(HERE, path), "w") as f:
        f.write(text)


def dgx_h100():
    # DGX H100 / HGX H100 8-GPU: 2x Xeon Platinum 8480C (56 cores, 112 threads
    # each), 2 TB RAM, 8x H100 SXM5 80GB on NVLink4 through 4 NVSwitches (18
    # links per GPU -> NV18 for every pair), 8x ConnectX-7 400 Gb/s NDR compute
    # ports, one per GPU behind the same PCIe switch (PXB); GPUs 0-3 and their
    # NICs on NUMA 0, 4-7 on NUMA 1. Sources: NVIDIA DGX H100 User Guide
    # (docs.nvidia.com/dgx/dgxh100-user-guide, "Hardware Overview" and "Network
    # Ports"), NVIDIA/nccl#1264 (NV18 between every pair on HGX H100), and
    # published `nvidia-smi topo -m` output of DGX H100 nodes (e.g.
    # vllm-project/vllm#13855): CPU affinity 0-55,112-167 / 56-111,168-223.
    # GPU bus ids are the DGX H100 ones (18, 2a, 3a, 5d, 9a, ab, ba, db); the
    # bridge bus numbers between root port and device are illustrative.
    # memory_bytes is 81559 MiB, the total nvidia-smi shows for an H100 80GB
    # HBM3 (A800 80GB: 81920 MiB).
    t = Tree(os.path.join(HERE, "dgx_h100/sysfs"))
    t.cpus(["0-55,112-167", "56-111,168-223"], 1056545156, "0-223",
           {0: 0, 56: 1, 112: 0, 168: 1})
    gpu_buses = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb]
    cuda, nvml_gpus, nvlinks = [], [], []
    switches = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    for i, g in enumerate(gpu_buses):
        numa = 0 if i < 4 else 1
        b = g - 5  # host bridge bus
        hb = "pci0000:%02x" % b
        rp = "0000:%02x:01.0" % b
        up = "0000:%02x:00.0" % (b + 1)
        dn_gpu = "0000:%02x:00.0" % (b + 2)
        hgx_up = "0000:%02x:00.0" % (b + 3)
        hgx_dn = "0000:%02x:00.0" % (b + 4)
        gpu = "0000:%02x:00.0" % g
        dn_nic = "0000:%02x:01.0" % (b + 2)
        nic = "0000:%02x:00.0" % (g + 1)
        t.pci_device(hb, [rp, up, dn_gpu, hgx_up, hgx_dn, gpu], numa)
        nic_path = t.pci_device(hb, [rp, up, dn_nic, nic], numa)
        t.ib_port(nic_path, "mlx5_%d" % i, "400 Gb/sec (4X NDR)")
        cuda.append('  - {index: %d, name: "NVIDIA H100 80GB HBM3", '
                    'memory_bytes: 85520809984, pci_bus_id: "%s", sm_count: 132}'
                    % (i, gpu))
        nvml_gpus.append('  - {index: %d, uuid: "GPU-4b6f7e2a-0000-4000-8000-00000000000%d", '
                         'pci_bus_id: "0000%s", name: "NVIDIA H100 80GB HBM3", '
                         'memory_bytes: 85520809984}' % (i, i, gpu))
        # 5 + 4 + 4 + 5 links to the four NVSwitches.
        first = 0
        for sw, count in zip(switches, [5, 4, 4, 5]):
            nvlinks.append('  - {gpu: %d, first_link: %d, count: %d, active: true, '
                           'remote_pci_bus_id: "%s"}' % (i, first, count, sw))
            first += count
    write("dgx_h100/cuda.yaml",
          "# Recorded CUDA runtime answers for a DGX H100 (see make_fixtures.py).\n"
          "origin: recorded DGX H100\ngpus:\n" + "\n".join(cuda) +
          "\npeer_access: all\n")
    ancestors = []
    for a in range(8):
        for b in range(a + 1, 8):
            if (a < 4) == (b < 4):
                ancestors.append("  - {gpus: [%d, %d], level: 40}" % (a, b))
    write("dgx_h100/nvml.yaml",
          "# Recorded NVML answers for a DGX H100 (see make_fixtures.py). NVML\n"
          "# pads the PCI domain to 8 digits. Same-socket pairs cross host\n"
          "# bridges within a NUMA node (NODE=40), others SYSTEM=50.\n"
          "origin: recorded DGX H100\ngpus:\n" + "\n".join(nvml_gpus) +
          "\nnvlinks:\n" + "\n".join(nvlinks) +
          "\ncommon_ancestor_default: 50\ncommon_ancestor:\n" +
          "\n".join(ancestors) + "\n")
    # The same node after GPU3's NVLink 17 went down (a retrained or failed
    # link): NVML then reports that link's state as inactive.
    down = [l for l in nvlinks if not l.startswith("  - {gpu: 3, first_link: 13")]
    down.append('  - {gpu: 3, first_link: 13, count: 4, active: true, '
                'remote_pci_bus_id: "%s"}' % switches[3])
    down.append('  - {gpu: 3, first_link: 17, count: 1, active: false, '
                'remote_pci_bus_id: "%s"}' % switches[3])
    write("dgx_h100/nvml_gpu3_link_down.yaml",
          "# dgx_h100/nvml.yaml with GPU3's NVLink 17 inactive.\n"
          "origin: recorded DGX H100, GPU3 link 17 down\ngpus:\n" +
          "\n".join(nvml_gpus) + "\nnvlinks:\n" + "\n".join(down) +
          "\ncommon_ancestor_default: 50\ncommon_ancestor:\n" +
          "\n".join(ancestors) + "\n")


def hgx_a800():
    # HGX A800 8-GPU (the China-market A100 variant): 8x A800-SXM4-80GB with 8
    # of the A100's 12 NVLink3 links enabled (400 GB/s instead of 600 GB/s) ->
    # NV8 between every pair through 6 NVSwitches; 4x ConnectX-6 200 Gb/s HDR,
    # one per PCIe switch shared by two GPUs (PIX); 2x Xeon Platinum 8358 (32
    # cores each), GPUs 0-3 on NUMA 0. Sources: docs/REFERENCES.md §D (A800 NVLink
    # 400 GB/s: tweakers.net/nieuws/203182, aiwiki.ai/wiki/nvidia_a800), the
    # `nvidia-smi topo -m` of an A800 node in NVIDIA/nccl#933 (NV8 everywhere,
    # PIX GPU-NIC), NVIDIA DGX A100 User Guide for the PCIe switch layout and
    # GPU bus ids (07, 0f, 47, 4e, 87, 90, b7, bd).
    t = Tree(os.path.join(HERE, "hgx_a800/sysfs"))
    t.cpus(["0-31,64-95", "32-63,96-127"], 527951580, "0-127",
           {0: 0, 32: 1, 64: 0, 96: 1})
    gpu_buses = [0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd]
    cuda, nvml_gpus, nvlinks = [], [], []
    for group in range(4):
        numa = 0 if group < 2 else 1
        g0 = gpu_buses[2 * group]
        b = g0 - 4
        hb = "pci0000:%02x" % b
        rp = "0000:%02x:01.0" % b
        up = "0000:%02x:00.0" % (b + 1)
        for k in range(2):
            i = 2 * group + k
            gpu = "0000:%02x:00.0" % gpu_buses[i]
            dn = "0000:%02x:%02x.0" % (b + 2, k)
            t.pci_device(hb, [rp, up, dn, gpu], numa)
            cuda.append('  - {index: %d, name: "NVIDIA A800-SXM4-80GB", '
                        'memory_bytes: 85899345920, pci_bus_id: "%s", sm_count: 108}'
                        % (i, gpu))
            nvml_gpus.append('  - {index: %d, uuid: "GPU-a800a800-0000-4000-8000-00000000000%d", '
                             'pci_bus_id: "0000%s"}' % (i, i, gpu))
            nvlinks.append('  - {gpu: %d, first_link: 0, count: 8, active: true, '
                           'remote_pci_bus_id: "0000:c0:00.0"}' % i)
        dn_nic = "0000:%02x:02.0" % (b + 2)
        nic = "0000:%02x:00.0" % (g0 + 2)
        nic_path = t.pci_device(hb, [rp, up, dn_nic, nic], numa)
        t.ib_port(nic_path, "mlx5_%d" % group, "200 Gb/sec (4X HDR)")
    write("hgx_a800/cuda.yaml",
          "# Recorded CUDA runtime answers for an HGX A800 (see make_fixtures.py).\n"
          "origin: recorded HGX A800\ngpus:\n" + "\n".join(cuda) +
          "\npeer_access: all\n")
    ancestors = []
    for a in range(8):
        for b in range(a + 1, 8):
            if a // 2 == b // 2:
                level = 10
            elif (a < 4) == (b < 4):
                level = 40
            else:
                continue
            ancestors.append("  - {gpus: [%d, %d], level: %d}" % (a, b, level))
    write("hgx_a800/nvml.yaml",
          "# Recorded NVML answers for an HGX A800 (see make_fixtures.py). The\n"
          "# NVSwitch far ends are all reported as one PCI id here.\n"
          "origin: recorded HGX A800\ngpus:\n" + "\n".join(nvml_gpus) +
          "\nnvlinks:\n" + "\n".join(nvlinks) +
          "\ncommon_ancestor_default: 50\ncommon_ancestor:\n" +
          "\n".join(ancestors) + "\n")


def broken():
    # Damaged inputs: one good NIC, then one problem per NIC.
    t = Tree(os.path.join(HERE, "broken/sysfs"))
    hb = "pci0000:10"
    good = t.pci_device(hb, ["0000:10:01.0", "0000:11:00.0"], 0)
    t.ib_port(good, "mlx5_0", "400 Gb/sec (4X NDR)")
    garbage = t.pci_device(hb, ["0000:10:02.0", "0000:12:00.0"], 0)
    t.ib_port(garbage, "mlx5_1", "fast")
    missing = t.pci_device(hb, ["0000:10:03.0", "0000:13:00.0"], 0)
    t.ib_port(missing, "mlx5_2", "100 Gb/sec (4X EDR)", state=None,
              phys="LinkUp")
    # A NIC with no PCI device (a virtual RDMA device): a plain directory. A
    # soft-RoCE port over a network device that is down: rxe reports DOWN and
    # Disabled (drivers/infiniband/sw/rxe/rxe_verbs.c, rxe_query_port).
    t.file("class/infiniband/rxe0/ports/1/rate", "25 Gb/sec (1X EDR)")
    t.file("class/infiniband/rxe0/ports/1/state", "1: DOWN")
    t.file("class/infiniband/rxe0/ports/1/phys_state", "3: Disabled")
    t.file("class/infiniband/rxe0/ports/1/link_layer", "Ethernet")
    # A device with no ports at all.
    t.file("class/infiniband/mlx5_9/node_type", "1: CA")
    t.file("devices/system/cpu/online", "0-3")


if __name__ == "__main__":
    dgx_h100()
    hgx_a800()
    broken()
