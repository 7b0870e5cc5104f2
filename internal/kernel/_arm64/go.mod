module github.com/flashattn/flashattn/internal/kernel/_arm64

go 1.24

require github.com/flashattn/flashattn/internal/kernel/_kconst v0.0.0

replace github.com/flashattn/flashattn/internal/kernel/_kconst => ../_kconst
