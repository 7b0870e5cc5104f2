package memlimit

// Flag is a command-line flag (a flag.Value) holding an explicit memory
// limit such as "4G". Unset, its Limit is what Detect reports.
type Flag struct {
	name string
	set  Size
}

// NewFlag returns an unset Flag whose messages call it name (e.g.
// "-max-memory").
func NewFlag(name string) *Flag { return &Flag{name: name} }

// String returns the limit as given, or "" when unset.
func (f *Flag) String() string {
	if f == nil || f.set == 0 {
		return ""
	}
	return f.set.String()
}

// Set parses a size (see ParseSize).
func (f *Flag) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	f.set = n
	return nil
}

// Limit returns the explicit limit if one was set, else Detect().
func (f *Flag) Limit() Limit {
	if f.set > 0 {
		return Limit{Bytes: f.set, Source: f.name + " " + f.set.String()}
	}
	return Detect()
}
