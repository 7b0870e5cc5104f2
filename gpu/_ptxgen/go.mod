module github.com/flashattn/flashattn/gpu/_ptxgen

go 1.26.0

require github.com/flashattn/flashattn v0.0.0

replace github.com/flashattn/flashattn => ../..
