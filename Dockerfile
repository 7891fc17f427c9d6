# asyrevel as a container image, built from nothing: no base image is pulled.
#
# The host's Go toolchain builds a static binary, and the image holds only it
# (make image does both):
#
#   CGO_ENABLED=0 go build -trimpath -o bin/docker/asyrevel ./cmd/asyrevel
#   mkdir -p bin/docker/tmp
#   docker build -t asyrevel:local -f Dockerfile bin/docker
#
# The build context is bin/docker (the binary and an empty tmp folder), not the
# repository. The process runs as an unprivileged user (65532); /tmp exists and
# is that user's (asyrevel train writes its temporary store there), and /store
# and /out are that user's too, so that a named volume mounted there starts
# writable.
FROM scratch
COPY asyrevel /asyrevel
COPY --chown=65532:65532 tmp /tmp
COPY --chown=65532:65532 tmp /store
COPY --chown=65532:65532 tmp /out
USER 65532:65532
ENV TMPDIR=/tmp HOME=/tmp
WORKDIR /tmp
ENTRYPOINT ["/asyrevel"]
CMD ["help"]
