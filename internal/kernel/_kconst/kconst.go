// Package kconst gives the assembly generators (_asm, _arm64) the
// constants of package kernel's float32 kernels, read from its generic.go,
// so that the generated tables and the generic kernels have one source
// instead of copies that must be kept equal.
package kconst

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
)

// Consts are the constants of one Go file by name: those whose value is a
// literal, optionally negated.
type Consts map[string]constant.Value

// Read parses the Go file at path and returns its constants.
func Read(path string) (Consts, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	c := Consts{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if v := literal(vs.Values[i]); v != nil {
						c[name.Name] = v
					}
				}
			}
		}
	}
	return c, nil
}

// MustRead is Read for a generator's package variables: it panics on error.
func MustRead(path string) Consts {
	c, err := Read(path)
	if err != nil {
		panic(fmt.Sprintf("kconst: %v", err))
	}
	return c
}

// literal returns the value of a numeric literal or its negation, else nil.
func literal(e ast.Expr) constant.Value {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.INT || e.Kind == token.FLOAT {
			return constant.MakeFromLiteral(e.Value, e.Kind, 0)
		}
	case *ast.UnaryExpr:
		if v := literal(e.X); v != nil && e.Op == token.SUB {
			return constant.UnaryOp(token.SUB, v, 0)
		}
	case *ast.ParenExpr:
		return literal(e.X)
	}
	return nil
}

// F64 is constant name as a float64, the nearest to its exact value (as
// float64(name) in Go). It panics if the file has no such constant.
func (c Consts) F64(name string) float64 {
	f, _ := constant.Float64Val(c.value(name))
	return f
}

// F32 is constant name as a float32, rounded once from its exact value
// (as float32(name) in Go, not float32(float64(name))).
func (c Consts) F32(name string) float32 {
	f, _ := constant.Float32Val(c.value(name))
	return f
}

func (c Consts) value(name string) constant.Value {
	v, ok := c[name]
	if !ok {
		panic(fmt.Sprintf("kconst: no numeric constant %s", name))
	}
	return v
}
