module github.com/flashattn/flashattn

go 1.26.0

require (
	github.com/sbinet/npyio v0.6.0
	golang.org/x/sys v0.49.0
)

require gonum.org/v1/gonum v0.16.0 // indirect
