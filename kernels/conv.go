package kernels

// Conv2D and its backward pass lower each sample to a GEMM through im2col: the sample's
// receptive fields become the columns of a (C·KH·KW)×(OutH·OutW) matrix, so the convolution is
// W (Out×C·KH·KW) times that matrix. Samples are split over the device's threads, each with its
// own im2col buffer and single-threaded GEMM; with OpenBLAS the samples run in order and BLAS
// uses the threads instead.

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
// GEMMs get one thread), or in one range with all threads given to BLAS.
func (d *CPU) convSamples(batch, colLen int) {
	if d.kernel == nil || d.threads == 1 || batch < 2 {
		d.col[0] = grow(d.col[0], colLen)
		if batch > 0 {
			d.convRange(0, 0, batch, d.threads)
		}
		return
	}
	for t := range d.col {
		d.col[t] = grow(d.col[t], colLen)
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

// convForwardRange computes samples [lo, hi) of the forward pass with workspace slot t.
func (d *CPU) convForwardRange(t, lo, hi, threads int) {
	j := &d.job
	s, rows, cols := j.s, j.rows, j.cols
	col := d.col[t]
	for n := lo; n < hi; n++ {
		xn := j.xs[n*s.InLen() : (n+1)*s.InLen()]
		yn := j.ys[n*s.OutLen() : (n+1)*s.OutLen()]
		if d.kernel != nil {
			w := d.gemm[t]
			w.conv = convB{x: xn, s: s}
			gemmPackedB(*d.kernel, d.gemm[t:t+threads], false, s.Out, cols, rows, 1, nil, d.wPack, &w.conv, 0, yn)
		} else {
			im2col(col, xn, s)
			d.sgemm(false, false, s.Out, cols, rows, 1, j.ws, col, 0, yn, threads, t)
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
	s, rows, cols := j.s, j.rows, j.cols
	col := d.col[t]
	part := j.dws
	if t > 0 {
		part = d.dwPart[t]
	}
	for n := lo; n < hi; n++ {
		dyn := j.dys[n*s.OutLen() : (n+1)*s.OutLen()]
		xn := j.xs[n*s.InLen() : (n+1)*s.InLen()]
		beta := float32(1)
		if n == lo {
			beta = 0
		}
		if d.kernel != nil {
			w := d.gemm[t]
			w.conv = convB{x: xn, s: s, trans: true}
			gemmPackedB(*d.kernel, d.gemm[t:t+threads], false, s.Out, rows, cols, 1, dyn, nil, &w.conv, beta, part)
		} else {
			im2col(col, xn, s)
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
		col2im(j.dxs[n*s.InLen():(n+1)*s.InLen()], col, s)
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

// convB is the im2col matrix of one sample x as GEMM operand B, packed straight from x without
// writing the matrix out: op(B) is col ((C·KH·KW)×(OutH·OutW)) or, when trans, colᵀ.
type convB struct {
	x     []float32
	s     ConvShape
	trans bool
}

func (p *convB) packB(dst []float32, jc, nc, pc, kc, nR int) {
	s := p.s
	kk2 := s.KH * s.KW
	for jr := 0; jr < nc; jr += nR {
		nr := min(nR, nc-jr)
		pan := dst[(jr/nR)*nR*kc : (jr/nR+1)*nR*kc]
		if !p.trans {
			// Rows of B are (c, kh, kw) = pc+kk, stepped without dividing; columns are
			// output positions jc+jr+j.
			c, kh, kw := pc/kk2, (pc%kk2)/s.KW, pc%s.KW
			oh0, ow0 := (jc+jr)/s.OutW(), (jc+jr)%s.OutW()
			for kk := 0; kk < kc; kk++ {
				d := pan[kk*nR : kk*nR+nR]
				gatherField(d, 1, p.x[c*s.H*s.W:(c+1)*s.H*s.W], s, kh, kw, oh0, ow0, nr)
				clear(d[nr:])
				if kw++; kw == s.KW {
					kw = 0
					if kh++; kh == s.KH {
						kh, c = 0, c+1
					}
				}
			}
			continue
		}
		// Rows of B are output positions pc+kk; columns are (c, kh, kw) = jc+jr+j.
		for j := 0; j < nR; j++ {
			if j >= nr {
				for kk := 0; kk < kc; kk++ {
					pan[kk*nR+j] = 0
				}
				continue
			}
			r := jc + jr + j
			c, kh, kw := r/kk2, (r%kk2)/s.KW, r%s.KW
			gatherField(pan[j:], nR, p.x[c*s.H*s.W:(c+1)*s.H*s.W], s, kh, kw, pc/s.OutW(), pc%s.OutW(), kc)
		}
	}
}

// gatherField writes, for n output positions from (oh, o) on in row-major order, the input
// value that kernel tap (kh, kw) reads from plane (0 in the padding) to dst[0], dst[stride],
// dst[2·stride], ...
func gatherField(dst []float32, stride int, plane []float32, s ConvShape, kh, kw, oh, o, n int) {
	ow, st := s.OutW(), s.stride()
	for i := 0; i < n; {
		seg := min(ow-o, n-i)
		ih := oh*st - s.Pad + kh
		if ih < 0 || ih >= s.H {
			for q := 0; q < seg; q++ {
				dst[(i+q)*stride] = 0
			}
		} else if row := plane[ih*s.W : ih*s.W+s.W]; st == 1 {
			// iw = o+q-Pad+kw is inside the row for q in [lo, hi).
			iw0 := o - s.Pad + kw
			lo, hi := min(max(0, -iw0), seg), max(min(seg, s.W-iw0), 0)
			hi = max(hi, lo)
			q := 0
			for ; q < lo; q++ {
				dst[(i+q)*stride] = 0
			}
			if lo == hi {
				// The whole segment reads padding.
			} else if stride == 1 {
				out := dst[i+lo : i+hi]
				in := row[iw0+lo : iw0+hi]
				for k := range out {
					out[k] = in[k]
				}
			} else {
				for ; q < hi; q++ {
					dst[(i+q)*stride] = row[iw0+q]
				}
			}
			for q = hi; q < seg; q++ {
				dst[(i+q)*stride] = 0
			}
		} else {
			for q := 0; q < seg; q++ {
				iw := (o+q)*st - s.Pad + kw
				v := float32(0)
				if iw >= 0 && iw < s.W {
					v = row[iw]
				}
				dst[(i+q)*stride] = v
			}
		}
		i += seg
		o, oh = 0, oh+1
	}
}

// im2col writes the receptive fields of one C×H×W sample into col, row (c, kh, kw), column
// (oh, ow), with zeros where the window hangs over the padding.
func im2col(col, x []float32, s ConvShape) {
	oh, ow, st := s.OutH(), s.OutW(), s.stride()
	p := 0
	for c := 0; c < s.C; c++ {
		plane := x[c*s.H*s.W : (c+1)*s.H*s.W]
		for kh := 0; kh < s.KH; kh++ {
			for kw := 0; kw < s.KW; kw++ {
				for i := 0; i < oh; i++ {
					dst := col[p : p+ow]
					p += ow
					ih := i*st - s.Pad + kh
					if ih < 0 || ih >= s.H {
						for j := range dst {
							dst[j] = 0
						}
						continue
					}
					row := plane[ih*s.W : (ih+1)*s.W]
					if st == 1 {
						// iw = j - Pad + kw; valid for j in [lo, hi).
						off := kw - s.Pad
						lo, hi := max(0, -off), min(ow, s.W-off)
						for j := 0; j < lo && j < ow; j++ {
							dst[j] = 0
						}
						if lo < hi {
							copy(dst[lo:hi], row[lo+off:hi+off])
						}
						for j := max(hi, 0); j < ow; j++ {
							dst[j] = 0
						}
						continue
					}
					for j := range dst {
						iw := j*st - s.Pad + kw
						if iw < 0 || iw >= s.W {
							dst[j] = 0
						} else {
							dst[j] = row[iw]
						}
					}
				}
			}
		}
	}
}

// col2im is the adjoint of im2col: it overwrites dx with the sum, over receptive fields, of
// the column entries that read each input element.
func col2im(dx, col []float32, s ConvShape) {
	for i := range dx {
		dx[i] = 0
	}
	oh, ow, st := s.OutH(), s.OutW(), s.stride()
	p := 0
	for c := 0; c < s.C; c++ {
		plane := dx[c*s.H*s.W : (c+1)*s.H*s.W]
		for kh := 0; kh < s.KH; kh++ {
			for kw := 0; kw < s.KW; kw++ {
				for i := 0; i < oh; i++ {
					src := col[p : p+ow]
					p += ow
					ih := i*st - s.Pad + kh
					if ih < 0 || ih >= s.H {
						continue
					}
					row := plane[ih*s.W : (ih+1)*s.W]
					if st == 1 {
						off := kw - s.Pad
						lo, hi := max(0, -off), min(ow, s.W-off)
						if lo < hi {
							dst := row[lo+off : hi+off]
							for j, v := range src[lo:hi] {
								dst[j] += v
							}
						}
						continue
					}
					for j, v := range src {
						iw := j*st - s.Pad + kw
						if iw >= 0 && iw < s.W {
							row[iw] += v
						}
					}
				}
			}
		}
	}
}
