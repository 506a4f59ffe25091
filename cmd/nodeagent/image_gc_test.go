package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Image GC runs every five minutes, the kubelet's fixed period, unless the
// hidden --image-gc-period (for the end-to-end tests) says otherwise; its
// settings come from the config file with the kubelet's defaults.
func TestImageGCSettings(t *testing.T) {
	f := newFlags(newKlogFlags())
	if _, err := f.parse(baseArgs(t)); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := buildConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.kubelet
	if cfg.imageGCPeriod != 5*time.Minute || *kc.ImageGCHighThresholdPercent != 85 || *kc.ImageGCLowThresholdPercent != 80 ||
		kc.ImageMinimumGCAge.Duration != 2*time.Minute || kc.ImageMaximumGCAge.Duration != 0 {
		t.Errorf("period %v, high %d low %d minAge %v maxAge %v; want the kubelet's 5m, 85, 80, 2m, 0",
			cfg.imageGCPeriod, *kc.ImageGCHighThresholdPercent, *kc.ImageGCLowThresholdPercent, kc.ImageMinimumGCAge.Duration, kc.ImageMaximumGCAge.Duration)
	}

	dir := t.TempDir()
	dropin := writeFile(t, dir, "conf.d/90-image-gc.conf", header+"imageMinimumGCAge: 10s\nimageMaximumGCAge: 30s\n")
	f = newFlags(newKlogFlags())
	if _, err := f.parse(append(baseArgs(t), "--config-dir="+strings.TrimSuffix(dropin, "/90-image-gc.conf"), "--image-gc-period=5s")); err != nil {
		t.Fatal(err)
	}
	if cfg, _, err = buildConfig(f); err != nil {
		t.Fatal(err)
	}
	if cfg.imageGCPeriod != 5*time.Second || cfg.kubelet.ImageMaximumGCAge.Duration != 30*time.Second {
		t.Errorf("period %v maxAge %v, want 5s and 30s", cfg.imageGCPeriod, cfg.kubelet.ImageMaximumGCAge.Duration)
	}

	var usage bytes.Buffer
	f = newFlags(newKlogFlags())
	f.fs.SetOutput(&usage)
	f.fs.PrintDefaults()
	if strings.Contains(usage.String(), "image-gc-period") {
		t.Error("--image-gc-period shows in the help; it is for tests only")
	}
}
