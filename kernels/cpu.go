package kernels

import (
	"errors"
	"fmt"
	"sync"
)

// CPUConfig configures the CPU backend.
type CPUConfig struct {
	// Threads is how many host threads one op may use (≥ 1). Several ranks on one host should
	// split the cores between them rather than each take them all.
	Threads int
	// GEMM picks the matrix-multiply engine: "auto" or "" (the fastest available), "go" (portable
	// pure Go), "avx2" (Go assembly, amd64 with AVX2 and FMA), "avx512" (Go assembly, amd64
	// with AVX-512F) or "openblas" (cgo, only in builds
	// with the openblas tag). See GEMMEngines.
	GEMM string
}

// maxCPUThreads bounds Threads to catch nonsense such as a negative value cast to uint.
const maxCPUThreads = 1024

// Validate reports a configuration NewCPUWith cannot honour.
func (c CPUConfig) Validate() error {
	if c.Threads < 1 || c.Threads > maxCPUThreads {
		return fmt.Errorf("kernels: cpu: threads = %d, want 1..%d", c.Threads, maxCPUThreads)
	}
	switch c.GEMM {
	case "", "auto":
		return nil
	}
	for _, e := range GEMMEngines() {
		if e == c.GEMM {
			return nil
		}
	}
	return fmt.Errorf("kernels: cpu: GEMM engine %q is not available in this build on this CPU; available: %v", c.GEMM, GEMMEngines())
}

// GEMMEngines lists the GEMM engines this build can use on this CPU, fastest first.
func GEMMEngines() []string {
	var out []string
	if openblasBuilt {
		out = append(out, "openblas")
	}
	if haveAVX512() {
		out = append(out, "avx512")
	}
	if haveAVX2FMA() {
		out = append(out, "avx2")
	}
	return append(out, "go")
}

// CPU is the host backend: tensors are Go slices, ops run on up to Threads goroutines. It is
// not safe for concurrent use.
type CPU struct {
	threads int
	engine  string
	kernel  *microKernel // nil when engine is "openblas"
	gemm    []*gemmWork  // one per thread
	col     [][]float32  // im2col workspace, one per thread
	pad     [][]float32  // a zero-padded input sample, one per thread
	dpad    [][]float32  // a zero-padded input gradient, one per thread
	geom    convGeom     // the convolution being run
	segs    []convSeg    // its output positions in runs
	dwPart  [][]float32  // per-thread weight-gradient partials for Conv2DBackward
	wPack   []float32    // a convolution's weights, packed once for all samples
	job     convJob      // the convolution being run
	err     error
}

// NewCPU returns a CPU device using threads host threads and the fastest GEMM engine.
func NewCPU(threads int) (*CPU, error) { return NewCPUWith(CPUConfig{Threads: threads}) }

// NewCPUWith returns a CPU device configured by cfg.
func NewCPUWith(cfg CPUConfig) (*CPU, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	engine := cfg.GEMM
	if engine == "" || engine == "auto" {
		engine = GEMMEngines()[0]
	}
	d := &CPU{threads: cfg.Threads, engine: engine}
	switch engine {
	case "openblas":
		// OpenBLAS's thread count is process-wide; every CPU device of the process shares it.
		openblasSetThreads(cfg.Threads)
	case "avx512":
		d.kernel = &gemmKernelAVX512
	case "avx2":
		d.kernel = &gemmKernelAVX2
	default:
		d.kernel = &gemmKernelGo
	}
	d.gemm = make([]*gemmWork, cfg.Threads)
	for i := range d.gemm {
		d.gemm[i] = &gemmWork{}
	}
	d.col = make([][]float32, cfg.Threads)
	d.pad = make([][]float32, cfg.Threads)
	d.dpad = make([][]float32, cfg.Threads)
	d.dwPart = make([][]float32, cfg.Threads)
	return d, nil
}

// Name implements Device.
func (d *CPU) Name() string { return fmt.Sprintf("cpu/%s×%d", d.engine, d.threads) }

// Threads implements Device.
func (d *CPU) Threads() int { return d.threads }

// GEMMEngine is the engine this device multiplies with.
func (d *CPU) GEMMEngine() string { return d.engine }

type cpuTensor struct {
	dev *CPU
	f   []float32
	i   []int32
}

func (t *cpuTensor) Len() int {
	if t.i != nil {
		return len(t.i)
	}
	return len(t.f)
}

func (t *cpuTensor) Index() bool { return t.i != nil }

// HostView returns the host memory behind t when t lives in host memory (a CPU tensor), so
// that a collective can read and write it without a copy. It returns nil, false for tensors of
// devices with their own memory and for index tensors.
func HostView(t Tensor) ([]float32, bool) {
	c, ok := t.(*cpuTensor)
	if !ok || c == nil || c.i != nil {
		return nil, false
	}
	return c.f, true
}

// Alloc implements Device.
func (d *CPU) Alloc(n int) (Tensor, error) {
	if n < 0 {
		return nil, fmt.Errorf("kernels: cpu: alloc of %d elements", n)
	}
	return &cpuTensor{dev: d, f: make([]float32, n)}, nil
}

// AllocIndex implements Device.
func (d *CPU) AllocIndex(n int) (Tensor, error) {
	if n < 0 {
		return nil, fmt.Errorf("kernels: cpu: index alloc of %d elements", n)
	}
	return &cpuTensor{dev: d, i: make([]int32, n), f: nil}, nil
}

// View implements Device.
func (d *CPU) View(t Tensor, off, n int) (Tensor, error) {
	c, ok := t.(*cpuTensor)
	if !ok || c == nil || c.dev != d {
		return nil, errors.New("kernels: cpu: view of a tensor from another device")
	}
	if off < 0 || n < 0 || off+n > c.Len() {
		return nil, fmt.Errorf("kernels: cpu: view [%d, %d) of a tensor of %d elements", off, off+n, c.Len())
	}
	if c.i != nil {
		return &cpuTensor{dev: d, i: c.i[off : off+n : off+n]}, nil
	}
	return &cpuTensor{dev: d, f: c.f[off : off+n : off+n]}, nil
}

// Free implements Device. Go's collector owns host memory, so this only drops the reference.
func (d *CPU) Free(t Tensor) {
	if c, ok := t.(*cpuTensor); ok && c != nil && c.dev == d {
		c.f, c.i = nil, nil
	}
}

// Upload implements Device.
func (d *CPU) Upload(dst Tensor, src []float32) error {
	c, ok := dst.(*cpuTensor)
	if !ok || c == nil || c.dev != d || c.i != nil || len(src) > len(c.f) {
		return fmt.Errorf("kernels: cpu: upload of %d values into %s", len(src), describe(dst))
	}
	copy(c.f, src)
	return nil
}

// Download implements Device.
func (d *CPU) Download(dst []float32, src Tensor) error {
	c, ok := src.(*cpuTensor)
	if !ok || c == nil || c.dev != d || c.i != nil || len(dst) > len(c.f) {
		return fmt.Errorf("kernels: cpu: download of %d values from %s", len(dst), describe(src))
	}
	copy(dst, c.f)
	return nil
}

// UploadIndex implements Device.
func (d *CPU) UploadIndex(dst Tensor, src []int32) error {
	c, ok := dst.(*cpuTensor)
	if !ok || c == nil || c.dev != d || c.i == nil || len(src) > len(c.i) {
		return fmt.Errorf("kernels: cpu: index upload of %d values into %s", len(src), describe(dst))
	}
	copy(c.i, src)
	return nil
}

// Sync implements Device: CPU ops run synchronously, so it only reports the first error.
func (d *CPU) Sync() error {
	err := d.err
	d.err = nil
	return err
}

func describe(t Tensor) string {
	switch c := t.(type) {
	case nil:
		return "a nil tensor"
	case *cpuTensor:
		if c == nil {
			return "a nil tensor"
		}
		if c.i != nil {
			return fmt.Sprintf("an index tensor of %d elements", len(c.i))
		}
		return fmt.Sprintf("a float32 tensor of %d elements", len(c.f))
	}
	return fmt.Sprintf("a %T from another device", t)
}

func (d *CPU) record(err error) {
	if d.err == nil {
		d.err = err
	}
}

// fl returns t's values when t is a float32 tensor of this device with at least n elements;
// otherwise it records why and returns nil.
func (d *CPU) fl(op, arg string, t Tensor, n int) []float32 {
	c, ok := t.(*cpuTensor)
	if ok && c != nil && c.dev == d && c.i == nil && c.f != nil && len(c.f) >= n && n >= 0 {
		return c.f[:n]
	}
	if ok && c != nil && c.dev == d && c.i == nil && n == 0 {
		return c.f[:0]
	}
	d.record(fmt.Errorf("kernels: cpu: %s: %s is %s, want a float32 tensor of this device with at least %d elements", op, arg, describe(t), n))
	return nil
}

func (d *CPU) idx(op, arg string, t Tensor, n int) []int32 {
	c, ok := t.(*cpuTensor)
	if ok && c != nil && c.dev == d && c.i != nil && len(c.i) >= n && n >= 0 {
		return c.i[:n]
	}
	d.record(fmt.Errorf("kernels: cpu: %s: %s is %s, want an index tensor of this device with at least %d elements", op, arg, describe(t), n))
	return nil
}

// same reports whether a and b have the same length, recording an error when not.
func (d *CPU) same(op string, ts ...Tensor) (n int, ok bool) {
	n = -1
	for _, t := range ts {
		c, isCPU := t.(*cpuTensor)
		if !isCPU || c == nil || c.dev != d || c.i != nil {
			d.record(fmt.Errorf("kernels: cpu: %s: operand is %s", op, describe(t)))
			return 0, false
		}
		if n >= 0 && len(c.f) != n {
			d.record(fmt.Errorf("kernels: cpu: %s: operand lengths differ (%d and %d)", op, n, len(c.f)))
			return 0, false
		}
		n = len(c.f)
	}
	return n, true
}

func f(t Tensor) []float32 { return t.(*cpuTensor).f }

// Gemm implements Device.
func (d *CPU) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Tensor, beta float32, c Tensor) {
	if m < 0 || n < 0 || k < 0 {
		d.record(fmt.Errorf("kernels: cpu: gemm: negative dimension m=%d n=%d k=%d", m, n, k))
		return
	}
	av := d.fl("gemm", "a", a, m*k)
	bv := d.fl("gemm", "b", b, k*n)
	cv := d.fl("gemm", "c", c, m*n)
	if av == nil || bv == nil || cv == nil {
		return
	}
	d.sgemm(transA, transB, m, n, k, alpha, av, bv, beta, cv, d.threads, 0)
}

// sgemm multiplies with the device's engine using up to threads goroutines and the workspaces
// from slot on (slot..slot+threads-1).
func (d *CPU) sgemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32, threads, slot int) {
	if m == 0 || n == 0 {
		return
	}
	if d.kernel == nil {
		openblasSgemm(transA, transB, m, n, k, alpha, a, b, beta, c)
		return
	}
	gemmPacked(*d.kernel, d.gemm[slot:slot+threads], transA, transB, m, n, k, alpha, a, b, beta, c)
}

// parallel runs fn(t, lo, hi) over [0, n) split into at most threads contiguous ranges, one
// goroutine each; range t always gets the same elements for the same n and threads, so
// per-thread partial results combine in a fixed order.
func parallel(threads, n int, fn func(t, lo, hi int)) {
	if threads > n {
		threads = n
	}
	if threads <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return
	}
	var wg sync.WaitGroup
	for t := 0; t < threads; t++ {
		lo, hi := t*n/threads, (t+1)*n/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(t, lo, hi)
		}()
	}
	wg.Wait()
}
