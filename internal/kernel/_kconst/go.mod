module github.com/flashattn/flashattn/internal/kernel/_kconst

go 1.24
