# gpucbf engines on a GPU host. Build:  docker build -t gpucbf .
# Run (bare metal, RDMA NIC):  docker run --gpus all --net=host --ulimit memlock=-1 \
#   --cap-add IPC_LOCK --device /dev/infiniband -v /dev/hugepages:/dev/hugepages gpucbf fgpu ...
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bin gpucbf

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
RUN apt-get update && apt-get install -y --no-install-recommends libibverbs1 iproute2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/gpucbf /usr/local/bin/gpucbf
ENTRYPOINT ["/usr/local/bin/gpucbf"]
