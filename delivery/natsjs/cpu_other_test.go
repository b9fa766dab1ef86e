//go:build !unix

package natsjs_test

import "time"

// processCPU is not measured here: BenchmarkPublishBatch reports time only.
func processCPU() time.Duration { return 0 }
