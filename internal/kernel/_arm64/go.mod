module github.com/flashattn/flashattn/internal/kernel/_arm64

go 1.24
