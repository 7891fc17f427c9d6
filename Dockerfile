# asyrevel as a container image, built from nothing: no base image is pulled.
#
# The host's Go toolchain builds a static binary, and the image holds only it
# (make image does both):
#
#   CGO_ENABLED=0 go build -trimpath -o bin/docker/asyrevel ./cmd/asyrevel
#   mkdir -p bin/docker/root/tmp bin/docker/root/store bin/docker/root/out
#   chmod 1777 bin/docker/root/tmp
#   docker build -t asyrevel:local -f Dockerfile bin/docker
#
# The build context is bin/docker (the binary and the empty folders), not the
# repository. The process runs as an unprivileged user (65532); /tmp exists and
# any user may write it, as on any host (asyrevel train writes its temporary
# store there; compose.yaml may run the participants as the host's user), and
# /store and /out are 65532's, so that a named volume mounted there starts
# writable.
FROM scratch
COPY asyrevel /asyrevel
COPY --chown=65532:65532 root /
USER 65532:65532
ENV TMPDIR=/tmp HOME=/tmp
WORKDIR /tmp
ENTRYPOINT ["/asyrevel"]
CMD ["help"]
