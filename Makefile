# asyrevel: make run (a real multi-party training), make test (the test suite).
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
BIN := bin/asyrevel
OUT ?= out/run

.PHONY: build run test bench lint fuzz clean

build:
	$(GO) build -o $(BIN) ./cmd/asyrevel

# The main job: 8 parties train a logistic regression with AsyREVEL over an
# embedded NATS JetStream broker, with progress lines, the final accuracy
# and a plot in $(OUT)/curve.png.
run: build
	./$(BIN) train --data synthetic:n=50000,d=128,test=10000,noise=0.05 \
		--parties 8 --algo asyrevel-gau --batch 64 --window 8 --duration 30s --out $(OUT)

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 8m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# A short fuzzing pass over every decoder.
fuzz:
	for f in FuzzHello FuzzPartyOutput FuzzReply FuzzEvalOutput FuzzControl FuzzParseSubject; do \
		$(GO) test ./schemas -run '^$$' -fuzz "^$$f$$" -fuzztime 20s || exit 1; done

clean:
	rm -rf bin out
