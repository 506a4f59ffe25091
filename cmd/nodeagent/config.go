package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// dropInExt is the extension of the files read from --config-dir.
const dropInExt = ".conf"

// typeMeta is the header every config file must carry.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// loadKubeletConfig reads the --config file and the --config-dir drop-ins
// into one defaulted KubeletConfiguration. Each unknown field yields one
// warning naming it and the file; the field is ignored, as upstream does.
// Either path may be empty.
func loadKubeletConfig(file, dir string) (*kubeletv1beta1.KubeletConfiguration, []string, error) {
	var warnings []string
	kc := &kubeletv1beta1.KubeletConfiguration{}
	if file != "" {
		doc, w, err := readConfigFile(file)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(doc, kc); err != nil {
			return nil, nil, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	// Drop-ins merge onto the defaulted base, as the kubelet does, so a
	// drop-in that sets only nodeStatusUpdateFrequency does not drag the
	// base's report frequency along with it.
	setDefaults(kc)
	if dir != "" {
		merged, w, err := mergeDropIns(kc, dir)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
		kc = merged
		setDefaults(kc)
	}
	return kc, warnings, nil
}

// readConfigFile returns the file as JSON after checking its apiVersion and
// kind and collecting unknown-field warnings.
func readConfigFile(path string) ([]byte, []string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config file: %w", err)
	}
	doc, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("config file %s: not valid YAML: %w", path, err)
	}
	var tm typeMeta
	if err := json.Unmarshal(doc, &tm); err != nil {
		return nil, nil, fmt.Errorf("config file %s: want a KubeletConfiguration object: %w", path, err)
	}
	wantAPI := kubeletv1beta1.SchemeGroupVersion.String()
	if tm.APIVersion != wantAPI || tm.Kind != "KubeletConfiguration" {
		return nil, nil, fmt.Errorf("config file %s: apiVersion %q kind %q: want apiVersion %s kind KubeletConfiguration",
			path, tm.APIVersion, tm.Kind, wantAPI)
	}
	var probe kubeletv1beta1.KubeletConfiguration
	strictErrs, err := sigsjson.UnmarshalStrict(doc, &probe)
	if err != nil {
		return nil, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var warnings []string
	for _, e := range strictErrs {
		warnings = append(warnings, fmt.Sprintf("config file %s: %v; it is not supported and is ignored", path, e))
	}
	return doc, warnings, nil
}

// mergeDropIns applies every *.conf file under dir, in lexical order of
// their paths, to base as JSON merge patches (RFC 7386).
func mergeDropIns(base *kubeletv1beta1.KubeletConfiguration, dir string) (*kubeletv1beta1.KubeletConfiguration, []string, error) {
	var warnings []string
	baseJSON, err := json.Marshal(base)
	if err != nil {
		return nil, nil, fmt.Errorf("encode base config: %w", err)
	}
	var merged any
	if err := json.Unmarshal(baseJSON, &merged); err != nil {
		return nil, nil, fmt.Errorf("decode base config: %w", err)
	}
	// WalkDir visits entries in lexical order, subdirectories included.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if filepath.Ext(path) != dropInExt {
			warnings = append(warnings, fmt.Sprintf("config dir %s: skipping %s: only *%s files are read", dir, path, dropInExt))
			return nil
		}
		doc, w, err := readConfigFile(path)
		if err != nil {
			return err
		}
		warnings = append(warnings, w...)
		var patch any
		if err := json.Unmarshal(doc, &patch); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		merged = mergePatch(merged, patch)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("config dir %s: %w", dir, err)
	}
	out, err := json.Marshal(merged)
	if err != nil {
		return nil, nil, fmt.Errorf("encode merged config: %w", err)
	}
	kc := &kubeletv1beta1.KubeletConfiguration{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(out, kc); err != nil {
		return nil, nil, fmt.Errorf("config dir %s: merged configuration: %w", dir, err)
	}
	return kc, warnings, nil
}

// mergePatch applies an RFC 7386 JSON merge patch: objects merge key by
// key, null deletes, anything else replaces.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}
