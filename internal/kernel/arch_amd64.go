package kernel

// Replaced by the assembly dispatch (AVX-512, AVX2+FMA).
func archImpls() []Impl { return nil }
