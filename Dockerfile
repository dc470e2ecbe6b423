# Multi-stage build of the imagemap binary; the deployment issue completes the runtime image.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
COPY crds crds
RUN cargo build --locked --release --bin imagemap

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/imagemap /usr/local/bin/imagemap
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/imagemap"]
