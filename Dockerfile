# imagemap's container image, for people with Docker: the same image scripts/image builds
# without a daemon (tests/image.rs compares them) — the binary, statically linked, CA
# certificates and passwd/group entries for 65532, nothing else (no shell).
# Build: docker build -t imagemap .
FROM rust:1.95.0-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
COPY crds crds
RUN RUSTFLAGS="-C target-feature=+crt-static -C strip=symbols" \
    cargo build --locked --release --target x86_64-unknown-linux-gnu --bin imagemap
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp /rootfs/home/nonroot \
    && cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
    && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
    && printf 'root:x:0:\nnonroot:x:65532:\n' > /rootfs/etc/group \
    && chmod 1777 /rootfs/tmp && chown 65532:65532 /rootfs/home/nonroot

FROM scratch
COPY --from=build /rootfs/ /
COPY --from=build /src/target/x86_64-unknown-linux-gnu/release/imagemap /usr/local/bin/imagemap
USER 65532:65532
WORKDIR /home/nonroot
ENV PATH=/usr/local/bin
ENTRYPOINT ["/usr/local/bin/imagemap"]
CMD ["run"]
