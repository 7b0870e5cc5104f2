package tile

// Param is one kernel parameter: its name and PTX type (.u64, .u32, .s32 or
// .f32). The generator declares the parameters in this order and the host
// passes them in this order.
type Param struct {
	Name, Type string
}

// Size returns the parameter's size in bytes.
func (p Param) Size() int {
	if p.Type == ".u64" {
		return 8
	}
	return 4
}

// seqParams are the sequence-geometry parameters every attention kernel takes:
// cu_seqlens (0 for a dense batch), seqused_k (0 for none), and the dense
// sequence lengths.
var seqParams = []Param{
	{"cu_q", ".u64"}, {"cu_k", ".u64"}, {"used_k", ".u64"},
	{"sq", ".u32"}, {"sk", ".u32"},
}

// scoreParams are the score-transform and mask parameters: in log2 units,
// y = s·scale_log2, or with a softcap y = cap_log2·tanh(s·cap_scale)
// (cap_log2 = 0 disables it); the window (left, right), -1 unbounded.
var scoreParams = []Param{
	{"scale_log2", ".f32"}, {"cap_scale", ".f32"}, {"cap_log2", ".f32"},
	{"left", ".s32"}, {"right", ".s32"}, {"group", ".u32"},
}

// packParams are the forward kernels' GQA packing ("pack_gqa"): with
// pack > 1 the block of grid index y serves the pack query heads
// h0 = y·pack … h0+pack-1 (which share KV head h0/group) as the rows of one
// query block, row r being head h0 + r/sq at position r%sq (sq the sq
// parameter: the longest sequence; with varlen, positions past a shorter
// sequence's end are rows that do not exist), so that each K/V tile is read
// once for all of them. The kernels divide by sq as (r·pack_div) >> 16 with
// pack_div = PackDiv(sq), exact for the rows of a packed block: the host
// packs only when pack·sq fits one query block (which then starts at row
// 0). pack = 1 with pack_div = 0 is the unpacked layout, y the head.
var packParams = []Param{{"pack", ".u32"}, {"pack_div", ".u32"}}

// PackDiv returns the pack_div parameter of a packed call with sq query
// rows per sequence: ceil(2^16/sq), for which (r·pack_div) >> 16 = r/sq
// whenever r·sq < 2^16.
func PackDiv(sq int) int { return (1<<16 + sq - 1) / sq }

func cat(lists ...[]Param) []Param {
	var out []Param
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// FwdParams are the forward kernel's parameters. Pointers are device
// addresses; *_bs are batch strides and *_rs row strides in elements
// (the head stride is D); LSE element (b, h, row) is at
// lse[b*lse_bs + h*lse_hs + qStart + row] with qStart the sequence's first
// packed row. With pack > 1 (packParams) the grid's y runs over groups of
// pack heads, and a block's row r is row r%sq of head y·pack + r/sq.
var FwdParams = cat([]Param{
	{"q", ".u64"}, {"k", ".u64"}, {"v", ".u64"}, {"o", ".u64"}, {"lse", ".u64"},
	{"q_bs", ".u64"}, {"k_bs", ".u64"}, {"o_bs", ".u64"}, {"lse_bs", ".u64"},
	{"q_rs", ".u32"}, {"k_rs", ".u32"}, {"o_rs", ".u32"}, {"lse_hs", ".u32"},
}, seqParams, scoreParams, packParams)

// BwdParams are the dK/dV kernel's parameters (both variants). dq_acc is
// the float32 dQ accumulator ([.., H, D] rows of dq_rs elements, atomic
// variant only), padded as Bwd.PadRows says: row i of sequence b is at
// b·dq_bs + (qStart + i)·dq_rs elements; dk, dv are float32 [.., H, D] per query head (rows of
// dkv_rs elements) that a conversion kernel sums over each KV head's group;
// dsum = rowsum(dO∘O) has the layout of lse; scale multiplies dS.
var BwdParams = cat([]Param{
	{"q", ".u64"}, {"k", ".u64"}, {"v", ".u64"}, {"do", ".u64"}, {"lse", ".u64"}, {"dsum", ".u64"},
	{"dq_acc", ".u64"}, {"dk", ".u64"}, {"dv", ".u64"},
	{"q_bs", ".u64"}, {"k_bs", ".u64"}, {"dq_bs", ".u64"}, {"dkv_bs", ".u64"}, {"lse_bs", ".u64"},
	{"q_rs", ".u32"}, {"k_rs", ".u32"}, {"dq_rs", ".u32"}, {"dkv_rs", ".u32"}, {"lse_hs", ".u32"},
	{"scale", ".f32"},
}, seqParams, scoreParams)

// DQParams are the deterministic dQ kernel's parameters; dq is written in
// the input type with the layout of q (row stride q_rs, batch stride q_bs).
var DQParams = cat([]Param{
	{"q", ".u64"}, {"k", ".u64"}, {"v", ".u64"}, {"do", ".u64"}, {"lse", ".u64"}, {"dsum", ".u64"},
	{"dq", ".u64"},
	{"q_bs", ".u64"}, {"k_bs", ".u64"}, {"lse_bs", ".u64"},
	{"q_rs", ".u32"}, {"k_rs", ".u32"}, {"lse_hs", ".u32"},
	{"scale", ".f32"},
}, seqParams, scoreParams)

// PreParams are the backward preprocessing kernel's parameters: dsum =
// rowsum(dO∘O) per (row, head), with dsum laid out like lse. The block
// has ElemThreads threads, one warp per (row, head); grid (ceil(maxSq/8), H, B).
var PreParams = cat([]Param{
	{"o", ".u64"}, {"do", ".u64"}, {"dsum", ".u64"},
	{"q_bs", ".u64"}, {"lse_bs", ".u64"},
	{"q_rs", ".u32"}, {"lse_hs", ".u32"}, {"d", ".u32"},
	{"cu_q", ".u64"}, {"sq", ".u32"},
})

// PreRows is the number of rows one preprocessing block handles.
const PreRows = ElemThreads / 32

// ConvertParams are the conversion kernel's parameters: out[row, j, :] =
// Σ_{g<group} in[row, j*group+g, :] for rows rows of heads*d outputs, in
// float32 and out in the input type, both dense.
var ConvertParams = []Param{
	{"in", ".u64"}, {"out", ".u64"},
	{"rows", ".u32"}, {"heads", ".u32"}, {"group", ".u32"}, {"d", ".u32"},
}

// ConvertDQParams are the parameters of the kernel that turns the padded
// float32 dQ accumulator into dq in the input type: for each sequence b
// (cu_q as in the attention kernels, 0 for a dense batch of sq rows) and
// row i < its length, out row b·out_bs + qStart + i = in row
// b·in_bs + qStart + i, rows of width elements (heads·D; strides in rows).
// Grid (ceil(width/2/ElemThreads), min(maxSq, 65535), batch), rows walked
// with a stride of the grid's y size.
var ConvertDQParams = []Param{
	{"in", ".u64"}, {"out", ".u64"}, {"cu_q", ".u64"}, {"sq", ".u32"},
	{"in_bs", ".u32"}, {"out_bs", ".u32"}, {"width", ".u32"},
}

// ConvertDQName names the dQ accumulator conversion kernel of input type dt.
func ConvertDQName(dt string) string { return "convdq_" + dt }

// ConvertName names the conversion kernel of input type dt.
func ConvertName(dt string) string { return "convert_" + dt }

// PreName names the backward preprocessing kernel of input type dt.
func PreName(dt string) string { return "bwdpre_" + dt }
