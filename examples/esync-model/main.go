// Command esync-model trains a model of its own with ESync through hetsync's trainer: a
// logistic regression written in this file, on synthetic data with float labels, that the
// trainer sees only as a parameter vector and a gradient step. Run it in-process or under any
// launcher:
//
//	go run ./examples/esync-model -np 4
//	go build -o esync-model ./examples/esync-model && hetsync launch -np 4 -- ./esync-model
//
// Every rank prints a checksum of its final parameters: ESync keeps the replicas bitwise
// identical, so all ranks print the same one. Rank 0 also prints the held-out loss and
// accuracy before and after training.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"sync"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/trainer"
)

func main() {
	np := flag.Int("np", 0, "run this many ranks as goroutines of this process (0: the ranks a launcher started, or one)")
	rounds := flag.Int("rounds", 100, "ESync rounds to train")
	flag.Parse()
	if err := run(context.Background(), *np, *rounds, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run trains on np in-process ranks, or as this process's rank of a launched job when np is 0.
func run(ctx context.Context, np, rounds int, out io.Writer) error {
	if np < 0 || rounds < 1 {
		return fmt.Errorf("esync-model: -np %d -rounds %d: want np ≥ 0 and rounds ≥ 1", np, rounds)
	}
	var mu sync.Mutex // the in-process ranks share out
	rank := func(ctx context.Context, c *hetsync.Comm) error {
		line, err := trainRank(ctx, c, rounds)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err = io.WriteString(out, line)
		return err
	}
	if np > 0 {
		return hetsync.InitLocal(ctx, np, rank)
	}
	c, err := hetsync.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return rank(ctx, c)
}

// trainRank trains this rank's model with ESync and returns what the rank reports.
func trainRank(ctx context.Context, c *hetsync.Comm, rounds int) (string, error) {
	m := newLogReg(newDataset(400, uint64(c.Rank())+1), 16)
	held := newDataset(1000, 1000)
	acc0, loss0 := held.evaluate(m.Params())
	cfg := trainer.Config{
		Strategy: "esync", Collective: c.Settings().Algorithm, Batch: 16, LR: 0.5, MaxRounds: rounds, Seed: 1,
		Eval: trainer.EvalEvery{Rounds: 20},
		// ESync's own options; the zero values take its defaults.
		Options: &trainer.ESyncConfig{Queries: trainer.ESyncBlocking},
	}
	res, err := trainer.Train(ctx, c.Endpoint(), cfg, m, trainer.TrainOptions{
		Comm: c,
		// The evaluator runs on a goroutine of its own: it reads only its arguments.
		Eval: func(_ context.Context, params []float32) (float64, float64, error) {
			acc, loss := held.evaluate(params)
			return acc, loss, nil
		},
	})
	if err != nil {
		return "", err
	}
	line := fmt.Sprintf("rank %d of %d: parameters crc32 %08x\n", c.Rank(), c.Size(), checksum(m.Params()))
	if c.Rank() == 0 {
		line += fmt.Sprintf("held-out loss %.4f → %.4f, accuracy %.3f → %.3f after %d rounds (%s)\n",
			loss0, res.FinalLoss, acc0, res.FinalAcc, len(res.Records), res.StopReason)
	}
	return line, nil
}

// The model: p(y=1 | x) = σ(w·x + b), trained on the mean binary cross-entropy.

const dim = 8

// dataset holds points x with float labels y ∈ {0, 1} drawn from a fixed true model, 10% of
// them flipped.
type dataset struct {
	x [][dim]float32
	y []float32
}

func newDataset(n int, seed uint64) *dataset {
	truth := rand.New(rand.NewPCG(42, 42)) // the same true model on every rank
	var w [dim]float64
	for j := range w {
		w[j] = truth.NormFloat64()
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	d := &dataset{x: make([][dim]float32, n), y: make([]float32, n)}
	for i := range d.x {
		z := 0.0
		for j := range w {
			d.x[i][j] = float32(rng.NormFloat64())
			z += w[j] * float64(d.x[i][j])
		}
		if (z > 0) != (rng.Float64() < 0.1) {
			d.y[i] = 1
		}
	}
	return d
}

// predict is σ(w·x_i + b) at params (w, then b).
func (d *dataset) predict(params []float32, i int) float64 {
	z := float64(params[dim])
	for j := 0; j < dim; j++ {
		z += float64(params[j]) * float64(d.x[i][j])
	}
	return 1 / (1 + math.Exp(-z))
}

// evaluate is the accuracy and mean cross-entropy of params on d.
func (d *dataset) evaluate(params []float32) (acc, loss float64) {
	correct := 0
	for i := range d.y {
		p := d.predict(params, i)
		loss += crossEntropy(p, d.y[i])
		if (p > 0.5) == (d.y[i] == 1) {
			correct++
		}
	}
	return float64(correct) / float64(len(d.y)), loss / float64(len(d.y))
}

func crossEntropy(p float64, y float32) float64 {
	const eps = 1e-12
	if y == 1 {
		return -math.Log(p + eps)
	}
	return -math.Log(1 - p + eps)
}

// logReg is the trainer.Model: it owns its data and batching.
type logReg struct {
	data   *dataset
	batch  int
	pos    int
	params []float32 // w, then b; zero on every rank, as ESync's identical replicas need
}

func newLogReg(d *dataset, batch int) *logReg {
	return &logReg{data: d, batch: batch, params: make([]float32, dim+1)}
}

func (m *logReg) Params() []float32 { return m.params }

func (m *logReg) Step(_ context.Context, grad []float32) (trainer.StepResult, error) {
	clear(grad)
	var r trainer.StepResult
	for k := 0; k < m.batch; k++ {
		i := (m.pos + k) % len(m.data.y)
		p := m.data.predict(m.params, i)
		y := m.data.y[i]
		r.Loss += crossEntropy(p, y)
		if (p > 0.5) == (y == 1) {
			r.Correct++
		}
		e := float32(p) - y // ∂loss/∂z
		for j := 0; j < dim; j++ {
			grad[j] += e * m.data.x[i][j]
		}
		grad[dim] += e
	}
	m.pos = (m.pos + m.batch) % len(m.data.y)
	for j := range grad {
		grad[j] /= float32(m.batch)
	}
	r.Loss /= float64(m.batch)
	r.Samples = m.batch
	return r, nil
}

// checksum is a CRC-32 of the parameters' bits.
func checksum(params []float32) uint32 {
	b := make([]byte, 4*len(params))
	for i, v := range params {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return crc32.ChecksumIEEE(b)
}
