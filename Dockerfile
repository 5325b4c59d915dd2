# gpucbf engines on a GPU host: CUDA 13 runtime on Ubuntu 24.04, release binary with the
# kernel-bypass receive paths (cargo features dpdk and ibverbs).
#
#   docker build -t gpucbf .
#
# Bare-metal deployment (an RDMA NIC such as a ConnectX, GPUs, real-time receive):
#
#   docker run --rm --gpus all --network host --device /dev/infiniband \
#     --cap-add IPC_LOCK --cap-add NET_RAW --cap-add SYS_NICE --ulimit memlock=-1 \
#     -v /dev/hugepages:/dev/hugepages \
#     gpucbf fgpu --recv-ibv --recv-interface 10.100.0.5 ... 239.10.0.0+7:7148
#
#   --network host          multicast joins (IGMP) and raw-packet QPs on the real NIC
#   --device /dev/infiniband  the uverbs devices that --recv-ibv (ibverbs) opens
#   --cap-add IPC_LOCK, --ulimit memlock=-1
#                           pinned memory: ibv_reg_mr, cuMemHostRegister of receive chunks
#   --cap-add NET_RAW       IBV_QPT_RAW_PACKET queue pairs and flow steering rules
#   --cap-add SYS_NICE      pinned receive threads (--recv-affinity)
#   -v /dev/hugepages       hugepage-backed chunks and DPDK mempools (--recv-dpdk)
#   DPDK on a ConnectX (mlx5 PMD) needs the same flags: mlx5 runs over ibverbs.
#
# Hugepages are reserved on the host, not in the container, e.g.
#   echo 4096 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
# Without them chunks fall back to normal pages (madvise(MADV_HUGEPAGE)) and DPDK needs
# `--no-huge` in its EAL arguments. The NVIDIA container toolkit (--gpus) provides libcuda;
# NVRTC and cuFFT come with the CUDA runtime image. Kernels and data are compiled into the
# binary (include_str!).

# ---- build stage: same distribution as the runtime stage, so the binary links the same
# DPDK (Ubuntu 24.04: DPDK 23.11) that the runtime stage installs.
FROM ubuntu:24.04 AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential ca-certificates curl pkg-config \
        libdpdk-dev libclang-dev clang \
    && rm -rf /var/lib/apt/lists/*
# Ubuntu's rustc is older than the crate's rust-version (1.88): use rustup.
ENV RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo PATH=/opt/cargo/bin:$PATH
RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
        | sh -s -- -y --profile minimal --default-toolchain stable
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY ffi ffi
COPY src src
COPY kernels kernels
COPY data data
# The FINUFFT cross-check script is compiled into the binary (src/bench/nufft/peer.rs).
COPY tools/nufft_check.py tools/nufft_check.py
RUN cargo build --release --locked --features dpdk,ibverbs --bin gpucbf \
    && strip target/release/gpucbf

# ---- runtime stage
FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
ARG DEBIAN_FRONTEND=noninteractive
# dpdk with its recommended PMDs (net_mlx5, net_af_packet, net_pcap, mempool drivers) and
# the DPDK libraries the binary links; libibverbs1 + ibverbs-providers (mlx5) for
# --recv-ibv, which loads libibverbs at run time; iproute2 for interface set-up.
RUN apt-get update && apt-get install -y \
        dpdk libibverbs1 ibverbs-providers iproute2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/gpucbf /usr/local/bin/gpucbf
# The commands katsdpcontroller runs (fgpu, xbgpu, dsim, schedrr) as links to gpucbf, which
# dispatches on its name. The controller adds SYS_NICE to fgpu/xbgpu containers, which
# schedrr needs; with the entry point below `schedrr ...` also works as `gpucbf schedrr ...`.
COPY tools/install-links.sh /usr/local/share/gpucbf/install-links.sh
RUN sh /usr/local/share/gpucbf/install-links.sh /usr/local/bin/gpucbf /usr/local/bin
# `gpucbf bench recv` finds its spead2 peer next to the executable (or --peer-script); it
# runs under --python, a Python with spead2 and numpy, which this image does not carry
# (mount one, or give --python "" to skip the spead2 rows).
COPY tools/spead2_recv_bench.py /usr/local/bin/spead2_recv_bench.py
# Fail the image build if a linked library (DPDK) is missing at run time.
RUN ! ldd /usr/local/bin/gpucbf | grep "not found" && /usr/local/bin/gpucbf --version
ENTRYPOINT ["/usr/local/bin/gpucbf"]
