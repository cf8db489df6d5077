package kernels

// Conv2D and its backward pass lower each sample to a GEMM through im2col: the sample's
// receptive fields become the columns of a (C·KH·KW)×(OutH·OutW) matrix, so the convolution is
// W (Out×C·KH·KW) times that matrix. Samples are split over the device's threads, each with its
// own buffers and single-threaded GEMM; with OpenBLAS the samples run in order and BLAS uses
// the threads instead.
//
// Every gather and scatter works on a zero-padded copy of the sample (convGeom), so that the
// im2col entry of tap r and output position q is xp[taps[r]+pos(q)] with no bounds test, and a
// run of output positions along one output row is a run of adjacent input values: packing a
// GEMM panel is a few copies per row instead of a test per element.

func (d *CPU) convArgs(op string, batch int, s ConvShape) bool {
	if err := s.Validate(); err != nil {
		d.record(err)
		return false
	}
	return d.dims(op, batch)
}

// Conv2D implements Device.
func (d *CPU) Conv2D(y, x, w, bias Tensor, batch int, s ConvShape) {
	const op = "conv2d"
	if !d.convArgs(op, batch, s) {
		return
	}
	ys := d.fl(op, "y", y, batch*s.OutLen())
	xs := d.fl(op, "x", x, batch*s.InLen())
	ws := d.fl(op, "w", w, s.WeightLen())
	bs := d.fl(op, "bias", bias, s.Out)
	if ys == nil || xs == nil || ws == nil || bs == nil {
		return
	}
	rows, cols := s.C*s.KH*s.KW, s.OutH()*s.OutW()
	colLen := rows * cols
	if d.kernel != nil {
		colLen = 0 // the packed GEMM reads the im2col matrix straight from x
		d.wPack = grow(d.wPack, prepackedALen(*d.kernel, s.Out, rows))
		prepackA(*d.kernel, d.wPack, ws, false, s.Out, rows, 1)
	}
	d.job = convJob{s: s, rows: rows, cols: cols, xs: xs, ys: ys, ws: ws, bs: bs}
	d.convSamples(batch, colLen)
	d.job = convJob{}
}

// convJob is one Conv2D or Conv2DBackward call's operands. It lives in the device, so that
// running the batch allocates nothing when it runs on one thread.
type convJob struct {
	s          ConvShape
	rows, cols int
	backward   bool
	xs, ys, ws []float32
	bs         []float32 // forward: bias
	dys, dws   []float32 // backward
	dxs        []float32 // backward, nil when the input gradient is not wanted
}

// convSamples runs the device's convJob over the batch: split over threads (each range's
// GEMMs get one thread), or in one range with all threads given to BLAS. It sets up the
// geometry and each used slot's buffers first: padded samples with zero borders and, when
// colLen > 0, im2col matrices.
func (d *CPU) convSamples(batch, colLen int) {
	g := &d.geom
	g.set(d.job.s)
	d.segs = g.segments(d.segs[:0], 0, d.job.cols)
	slots := 1
	if d.kernel != nil && d.threads > 1 && batch >= 2 {
		slots = min(d.threads, batch)
	}
	for t := 0; t < slots; t++ {
		d.col[t] = grow(d.col[t], colLen)
		if !g.usesInputRaw {
			d.pad[t] = grow(d.pad[t], g.paddedLen)
			clear(d.pad[t])
			if d.job.dxs != nil {
				d.dpad[t] = grow(d.dpad[t], g.paddedLen)
			}
		}
	}
	if batch == 0 {
		return
	}
	if slots == 1 {
		d.convRange(0, 0, batch, d.threads)
		return
	}
	parallel(d.threads, batch, func(t, lo, hi int) { d.convRange(t, lo, hi, 1) })
}

func (d *CPU) convRange(t, lo, hi, threads int) {
	if d.job.backward {
		d.convBackwardRange(t, lo, hi, threads)
	} else {
		d.convForwardRange(t, lo, hi, threads)
	}
}

// setConvB points workspace t's convB at padded sample xp.
func (d *CPU) setConvB(t int, xp []float32, trans bool) *convB {
	c := &d.gemm[t].conv
	c.g, c.xp, c.trans = &d.geom, xp, trans
	return c
}

// convForwardRange computes samples [lo, hi) of the forward pass with workspace slot t.
func (d *CPU) convForwardRange(t, lo, hi, threads int) {
	j := &d.job
	g := &d.geom
	s, rows, cols := j.s, j.rows, j.cols
	for n := lo; n < hi; n++ {
		xp := g.padded(d.pad[t], j.xs[n*s.InLen():(n+1)*s.InLen()])
		yn := j.ys[n*s.OutLen() : (n+1)*s.OutLen()]
		if d.kernel != nil {
			gemmPackedB(*d.kernel, d.gemm[t:t+threads], false, s.Out, cols, rows, 1, nil, d.wPack, d.setConvB(t, xp, false), 0, yn)
		} else {
			g.im2col(d.col[t], xp, d.segs)
			d.sgemm(false, false, s.Out, cols, rows, 1, j.ws, d.col[t], 0, yn, threads, t)
		}
		for o := 0; o < s.Out; o++ {
			v := j.bs[o]
			r := yn[o*cols : (o+1)*cols]
			for i := range r {
				r[i] += v
			}
		}
	}
}

// convBackwardRange computes samples [lo, hi) of the backward pass with workspace slot t; the
// weight gradient of slot t > 0 goes to its partial sum.
func (d *CPU) convBackwardRange(t, lo, hi, threads int) {
	j := &d.job
	g := &d.geom
	s, rows, cols := j.s, j.rows, j.cols
	col := d.col[t]
	part := j.dws
	if t > 0 {
		part = d.dwPart[t]
	}
	for n := lo; n < hi; n++ {
		dyn := j.dys[n*s.OutLen() : (n+1)*s.OutLen()]
		xp := g.padded(d.pad[t], j.xs[n*s.InLen():(n+1)*s.InLen()])
		beta := float32(1)
		if n == lo {
			beta = 0
		}
		if d.kernel != nil {
			gemmPackedB(*d.kernel, d.gemm[t:t+threads], false, s.Out, rows, cols, 1, dyn, nil, d.setConvB(t, xp, true), beta, part)
		} else {
			g.im2col(col, xp, d.segs)
			d.sgemm(false, true, s.Out, rows, cols, 1, dyn, col, beta, part, threads, t)
		}
		if j.dxs == nil {
			continue
		}
		if d.kernel != nil {
			w := d.gemm[t]
			w.dense = denseB{b: dyn, n: cols, k: s.Out}
			gemmPackedB(*d.kernel, d.gemm[t:t+threads], true, rows, cols, s.Out, 1, nil, d.wPack, &w.dense, 0, col)
		} else {
			d.sgemm(true, false, rows, cols, s.Out, 1, j.ws, dyn, 0, col, threads, t)
		}
		dxn := j.dxs[n*s.InLen() : (n+1)*s.InLen()]
		if g.usesInputRaw {
			clear(dxn)
			g.col2im(dxn, col, d.segs)
			continue
		}
		clear(d.dpad[t])
		g.col2im(d.dpad[t], col, d.segs)
		g.unpad(dxn, d.dpad[t])
	}
}

// Conv2DBackward implements Device.
func (d *CPU) Conv2DBackward(dx, dw, db, dy, x, w Tensor, batch int, s ConvShape) {
	const op = "conv2d backward"
	if !d.convArgs(op, batch, s) {
		return
	}
	dys := d.fl(op, "dy", dy, batch*s.OutLen())
	xs := d.fl(op, "x", x, batch*s.InLen())
	ws := d.fl(op, "w", w, s.WeightLen())
	dws := d.fl(op, "dw", dw, s.WeightLen())
	dbs := d.fl(op, "db", db, s.Out)
	var dxs []float32
	if dx != nil {
		dxs = d.fl(op, "dx", dx, batch*s.InLen())
	}
	if dys == nil || xs == nil || ws == nil || dws == nil || dbs == nil || (dx != nil && dxs == nil) {
		return
	}
	rows, cols := s.C*s.KH*s.KW, s.OutH()*s.OutW()
	sumBias(dbs, dys, batch, s.Out, cols)
	nthreads := 1
	if d.kernel != nil && d.threads > 1 && batch >= 2 {
		nthreads = min(d.threads, batch)
	}
	for t := 1; t < nthreads; t++ {
		d.dwPart[t] = grow(d.dwPart[t], s.WeightLen())
	}
	if dxs != nil && d.kernel != nil {
		// dcol = Wᵀ·dy for every sample: pack Wᵀ once.
		d.wPack = grow(d.wPack, prepackedALen(*d.kernel, rows, s.Out))
		prepackA(*d.kernel, d.wPack, ws, true, rows, s.Out, 1)
	}
	d.job = convJob{s: s, rows: rows, cols: cols, backward: true, xs: xs, ws: ws, dys: dys, dws: dws, dxs: dxs}
	d.convSamples(batch, rows*cols)
	d.job = convJob{}
	if batch == 0 {
		for i := range dws {
			dws[i] = 0
		}
	}
	for t := 1; t < nthreads; t++ {
		axpy(1, d.dwPart[t], dws)
	}
}

// convGeom is a convolution's geometry over a zero-padded sample: C planes of hp×wp with the
// input at offset (Pad, Pad) of each. Tap r = (c, kh, kw) of output position q = (oh, ow)
// reads xp[taps[r] + pos(q)].
type convGeom struct {
	s            ConvShape
	hp, wp       int
	oh, ow, st   int
	taps         []int // c·hp·wp + kh·wp + kw for every im2col row
	paddedLen    int   // C·hp·wp
	usesInputRaw bool  // no padding: the sample itself is the padded sample
}

// convSeg is a run of n output positions, starting dst positions after the first one asked
// for, whose inputs are adjacent: tap r reads xp[taps[r]+src : taps[r]+src+n].
type convSeg struct{ dst, src, n int }

func (g *convGeom) set(s ConvShape) {
	g.s = s
	g.hp, g.wp = s.H+2*s.Pad, s.W+2*s.Pad
	g.oh, g.ow, g.st = s.OutH(), s.OutW(), s.stride()
	g.paddedLen = s.C * g.hp * g.wp
	g.usesInputRaw = s.Pad == 0
	rows := s.C * s.KH * s.KW
	if cap(g.taps) < rows {
		g.taps = make([]int, rows)
	}
	g.taps = g.taps[:rows]
	r := 0
	for c := 0; c < s.C; c++ {
		for kh := 0; kh < s.KH; kh++ {
			for kw := 0; kw < s.KW; kw++ {
				g.taps[r] = c*g.hp*g.wp + kh*g.wp + kw
				r++
			}
		}
	}
}

// segments appends to segs the runs of output positions [q0, q0+n): along an output row when
// the stride is 1, one position each otherwise.
func (g *convGeom) segments(segs []convSeg, q0, n int) []convSeg {
	for q := q0; q < q0+n; {
		row, col := q/g.ow, q%g.ow
		m := 1
		if g.st == 1 {
			m = min(g.ow-col, q0+n-q)
		}
		segs = append(segs, convSeg{dst: q - q0, src: row*g.st*g.wp + col*g.st, n: m})
		q += m
	}
	return segs
}

// padded returns sample x as a padded sample: x itself without padding, otherwise x copied
// into the interior of buf, whose border the caller has zeroed.
func (g *convGeom) padded(buf, x []float32) []float32 {
	if g.usesInputRaw {
		return x
	}
	s := g.s
	for c := 0; c < s.C; c++ {
		for h := 0; h < s.H; h++ {
			o := c*g.hp*g.wp + (h+s.Pad)*g.wp + s.Pad
			copy(buf[o:o+s.W], x[(c*s.H+h)*s.W:(c*s.H+h+1)*s.W])
		}
	}
	return buf
}

// unpad writes the interior of padded sample xp to dx.
func (g *convGeom) unpad(dx, xp []float32) {
	s := g.s
	for c := 0; c < s.C; c++ {
		for h := 0; h < s.H; h++ {
			o := c*g.hp*g.wp + (h+s.Pad)*g.wp + s.Pad
			copy(dx[(c*s.H+h)*s.W:(c*s.H+h+1)*s.W], xp[o:o+s.W])
		}
	}
}

// im2col writes the im2col matrix of padded sample xp into col (rows taps, columns output
// positions); segs are the segments of all OutH·OutW positions.
func (g *convGeom) im2col(col, xp []float32, segs []convSeg) {
	cols := g.oh * g.ow
	for r, t := range g.taps {
		row := col[r*cols : (r+1)*cols]
		for _, sg := range segs {
			copy(row[sg.dst:sg.dst+sg.n], xp[t+sg.src:t+sg.src+sg.n])
		}
	}
}

// col2im is the adjoint of im2col: it adds every entry of col into the element of padded
// sample dxp that it was read from.
func (g *convGeom) col2im(dxp, col []float32, segs []convSeg) {
	cols := g.oh * g.ow
	for r, t := range g.taps {
		row := col[r*cols : (r+1)*cols]
		for _, sg := range segs {
			dst := dxp[t+sg.src : t+sg.src+sg.n]
			for i, v := range row[sg.dst : sg.dst+sg.n] {
				dst[i] += v
			}
		}
	}
}

// convB is the im2col matrix of one padded sample xp as GEMM operand B, packed straight from
// xp without writing the matrix out: op(B) is col ((C·KH·KW)×(OutH·OutW)) or, when trans,
// colᵀ.
type convB struct {
	g     *convGeom
	xp    []float32
	trans bool
	segs  []convSeg // scratch, kept so that packing allocates nothing in steady state
}

func (p *convB) packB(dst []float32, jc, nc, pc, kc, nR int) {
	g := p.g
	if p.trans {
		p.packTrans(dst, jc, nc, pc, kc, nR)
		return
	}
	// Rows of B are taps pc+kk; columns are output positions jc+jr+j.
	for jr := 0; jr < nc; jr += nR {
		nr := min(nR, nc-jr)
		pan := dst[(jr/nR)*nR*kc : (jr/nR+1)*nR*kc]
		p.segs = g.segments(p.segs[:0], jc+jr, nr)
		for kk := 0; kk < kc; kk++ {
			d := pan[kk*nR : kk*nR+nR]
			src := p.xp[g.taps[pc+kk]:]
			for _, sg := range p.segs {
				copy(d[sg.dst:sg.dst+sg.n], src[sg.src:sg.src+sg.n])
			}
			clear(d[nr:])
		}
	}
}

// packTrans packs colᵀ: rows of B are output positions pc+kk, columns are taps jc+jr+j. Four
// taps go together, so each position writes four adjacent values.
func (p *convB) packTrans(dst []float32, jc, nc, pc, kc, nR int) {
	g := p.g
	p.segs = g.segments(p.segs[:0], pc, kc)
	for jr := 0; jr < nc; jr += nR {
		nr := min(nR, nc-jr)
		pan := dst[(jr/nR)*nR*kc : (jr/nR+1)*nR*kc]
		j := 0
		for ; j+4 <= nr; j += 4 {
			t := g.taps[jc+jr+j : jc+jr+j+4]
			for _, sg := range p.segs {
				s0 := p.xp[t[0]+sg.src : t[0]+sg.src+sg.n]
				s1 := p.xp[t[1]+sg.src : t[1]+sg.src+sg.n]
				s2 := p.xp[t[2]+sg.src : t[2]+sg.src+sg.n]
				s3 := p.xp[t[3]+sg.src : t[3]+sg.src+sg.n]
				for q := range s0 {
					d := (*[4]float32)(pan[(sg.dst+q)*nR+j:])
					d[0], d[1], d[2], d[3] = s0[q], s1[q], s2[q], s3[q]
				}
			}
		}
		for ; j < nr; j++ {
			t := g.taps[jc+jr+j]
			for _, sg := range p.segs {
				for q, v := range p.xp[t+sg.src : t+sg.src+sg.n] {
					pan[(sg.dst+q)*nR+j] = v
				}
			}
		}
		if nr < nR {
			for kk := 0; kk < kc; kk++ {
				clear(pan[kk*nR+nr : kk*nR+nR])
			}
		}
	}
}
