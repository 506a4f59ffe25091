package runtime

import (
	"testing"

	"google.golang.org/grpc/mem"
)

func TestAnswerBuffersPoolOnlySmallOnes(t *testing.T) {
	big := 1<<maxPooledExp + 1
	b := answerBuffers.Get(big)
	if len(*b) != big || cap(*b) != big {
		t.Fatalf("Get(%d): len %d cap %d, want both %d (no rounding up)", big, len(*b), cap(*b), big)
	}
	first := &(*b)[0]
	answerBuffers.Put(b)
	again := answerBuffers.Get(big)
	if &(*again)[0] == first {
		t.Fatal("a buffer over the pooled sizes came back from the pool")
	}

	small := answerBuffers.Get(1000)
	if len(*small) != 1000 || cap(*small) < 1000 || cap(*small) > 1024 {
		t.Fatalf("Get(1000): len %d cap %d, want 1000 in a 1-KiB buffer", len(*small), cap(*small))
	}
	answerBuffers.Put(small)
	edge := answerBuffers.Get(1 << maxPooledExp)
	if cap(*edge) != 1<<maxPooledExp {
		t.Fatalf("Get(%d): cap %d, want the largest pooled size", 1<<maxPooledExp, cap(*edge))
	}
	answerBuffers.Put(edge)
}

// The proto codec reads every answer into gRPC's default pool, whatever pool the
// connection has: answerBuffers must be that default.
func TestAnswerBuffersAreGRPCsDefault(t *testing.T) {
	if mem.DefaultBufferPool() != answerBuffers {
		t.Fatalf("gRPC's default buffer pool is %T, want answerBuffers", mem.DefaultBufferPool())
	}
}
