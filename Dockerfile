# imagemap's container image: a static binary on distroless/static, running as non-root.
# Build: docker build -t imagemap .
FROM rust:1.95.0-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
COPY crds crds
RUN cargo build --locked --release --target x86_64-unknown-linux-musl --bin imagemap

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/imagemap /usr/local/bin/imagemap
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/imagemap"]
CMD ["run"]
