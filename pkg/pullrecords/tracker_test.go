package pullrecords

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

const (
	testImage = "127.0.0.1:5001/e2e/busybox:1.0"
	testRepo  = "127.0.0.1:5001/e2e/busybox"
	testRef   = "sha256:1111"
)

// fakeImages is the runtime's image list.
type fakeImages []*runtimeapi.Image

func (f fakeImages) ListImages(context.Context) ([]*runtimeapi.Image, error) { return f, nil }

func open(t *testing.T, root string, mode kubeletv1beta1.ImagePullCredentialsVerificationPolicy, images ImageLister) *Tracker {
	t.Helper()
	tr, err := Open(context.Background(), Config{RootDir: root, Policy: mustPolicy(t, mode), Images: images,
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func hashName(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:])
}

func readFile(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func secretUsed(s kubeletv1beta1.ImagePullSecret) *kubeletv1beta1.ImagePullCredentials {
	return &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{s}}
}

// TestIntentBeforePullRecordAfter: the files on disk at each point of a
// pull, in the kubelet's directories and naming.
func TestIntentBeforePullRecordAfter(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr := open(t, root, kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	intent := filepath.Join(root, "image_manager", "pulling", hashName(testImage))
	record := filepath.Join(root, "image_manager", "pulled", hashName(testRef))

	if err := tr.PullStarting(testImage); err != nil {
		t.Fatal(err)
	}
	got := readFile(t, intent)
	want := map[string]any{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "ImagePullIntent", "image": testImage}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("intent during the pull = %v, want %v", got, want)
	}
	if exists(record) {
		t.Error("a pulled record exists before the pull ended")
	}

	tr.Pulled(ctx, testImage, testRef, secretUsed(secretA))
	if exists(intent) {
		t.Error("the intent outlived the pull")
	}
	rec := readFile(t, record)
	if rec["kind"] != "ImagePulledRecord" || rec["imageRef"] != testRef || rec["lastUpdatedTime"] != "2026-01-02T03:04:05Z" {
		t.Errorf("record = %v", rec)
	}
	mapping, _ := json.Marshal(rec["credentialMapping"])
	if string(mapping) != `{"127.0.0.1:5001/e2e/busybox":{"kubernetesSecrets":[{"credentialHash":"hash-a","name":"regcred","namespace":"ns1","uid":"uid-a"}]}}` {
		t.Errorf("credentialMapping = %s", mapping)
	}

	// A failed pull leaves no record and no intent.
	if err := tr.PullStarting("r.io/absent:1"); err != nil {
		t.Fatal(err)
	}
	tr.PullFailed(ctx, "r.io/absent:1")
	if exists(filepath.Join(root, "image_manager", "pulling", hashName("r.io/absent:1"))) {
		t.Error("a failed pull left its intent")
	}
}

// TestRecordsSurviveRestart: what one run recorded judges pods in the next.
func TestRecordsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr := open(t, root, kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	if err := tr.PullStarting(testImage); err != nil {
		t.Fatal(err)
	}
	tr.Pulled(ctx, testImage, testRef, secretUsed(secretA))

	tr = open(t, root, kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	if v := tr.MustPull(ctx, testImage, testRef, []kubeletv1beta1.ImagePullSecret{secretA}); v.Pull {
		t.Errorf("pod with the pulling secret: %+v, want no pull", v)
	}
	if v := tr.MustPull(ctx, testImage, testRef, nil); !v.Pull {
		t.Errorf("pod without secrets: %+v, want a pull", v)
	}
	// Another tag of the same repository, same image: the same credentials.
	if v := tr.MustPull(ctx, testRepo+":other", testRef, []kubeletv1beta1.ImagePullSecret{secretA}); v.Pull {
		t.Errorf("other tag, same secret: %+v, want no pull", v)
	}
	// The same image under another repository name: nothing recorded.
	if v := tr.MustPull(ctx, "127.0.0.1:5000/e2e/busybox:1.0", testRef, []kubeletv1beta1.ImagePullSecret{secretA}); !v.Pull || v.Reason != ReasonNoRecord {
		t.Errorf("other repository: %+v, want a pull for want of a record", v)
	}
	// An image the agent never pulled is preloaded.
	if v := tr.MustPull(ctx, "r.io/preloaded:1", "sha256:2222", nil); v.Pull {
		t.Errorf("preloaded image: %+v, want no pull", v)
	}
}

// TestCrashDuringPull: an intent left by a crash makes the image the
// agent's: present, it becomes a record without credentials (every pod
// must verify); absent, the intent stays and still counts.
func TestCrashDuringPull(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr := open(t, root, kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	for _, image := range []string{testImage, "r.io/gone:1"} {
		if err := tr.PullStarting(image); err != nil {
			t.Fatal(err)
		}
	}
	// The agent dies here; at the next start the runtime holds the first.
	present := fakeImages{{Id: testRef, RepoTags: []string{testImage}}}
	tr = open(t, root, kubeletv1beta1.NeverVerifyPreloadedImages, present)

	if exists(filepath.Join(root, "image_manager", "pulling", hashName(testImage))) {
		t.Error("the intent of an image now present stayed")
	}
	if !exists(filepath.Join(root, "image_manager", "pulled", hashName(testRef))) {
		t.Error("no record for the image the interrupted pull brought")
	}
	if v := tr.MustPull(ctx, testImage, testRef, []kubeletv1beta1.ImagePullSecret{secretA}); !v.Pull || v.Reason != ReasonNoRecord {
		t.Errorf("interrupted pull's image: %+v, want a pull for want of credentials", v)
	}
	if !exists(filepath.Join(root, "image_manager", "pulling", hashName("r.io/gone:1"))) {
		t.Error("the intent of an absent image went")
	}
	// Should that image appear (pulled behind the agent's back), it is
	// still not preloaded.
	if v := tr.MustPull(ctx, "r.io/gone:1", "sha256:3333", nil); !v.Pull {
		t.Errorf("image with a leftover intent: %+v, want a pull", v)
	}
}

// TestConcurrentPullsShareOneIntent: the intent goes with the last pull.
func TestConcurrentPullsShareOneIntent(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr := open(t, root, kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	intent := filepath.Join(root, "image_manager", "pulling", hashName(testImage))
	for range 2 {
		if err := tr.PullStarting(testImage); err != nil {
			t.Fatal(err)
		}
	}
	tr.PullFailed(ctx, testImage)
	if !exists(intent) {
		t.Fatal("the intent went while a pull was still under way")
	}
	// Meanwhile the image is the agent's, even without a record.
	if v := tr.MustPull(ctx, testImage, testRef, nil); !v.Pull {
		t.Errorf("image being pulled: %+v, want a pull", v)
	}
	tr.Pulled(ctx, testImage, testRef, &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true})
	if exists(intent) {
		t.Error("the intent outlived both pulls")
	}
	if v := tr.MustPull(ctx, testImage, testRef, nil); v.Pull || v.Reason != ReasonAnonymous {
		t.Errorf("image pulled without credentials: %+v, want anyone's", v)
	}
}

// TestMatchesAreRemembered: a credential matched under other coordinates
// is added to the record, so that it matches by its secret next time.
func TestMatchesAreRemembered(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr := open(t, root, kubeletv1beta1.AlwaysVerify, nil)
	if err := tr.PullStarting(testImage); err != nil {
		t.Fatal(err)
	}
	tr.Pulled(ctx, testImage, testRef, secretUsed(secretA))
	copyA := kubeletv1beta1.ImagePullSecret{Namespace: "ns3", Name: "copy", UID: "uid-c", CredentialHash: "hash-a"}
	if v := tr.MustPull(ctx, testImage, testRef, []kubeletv1beta1.ImagePullSecret{copyA}); v.Pull || v.Reason != ReasonHash {
		t.Fatalf("copy of the credential: %+v, want a match by hash", v)
	}
	rec, err := tr.store.record(testRef)
	if err != nil {
		t.Fatal(err)
	}
	want := []kubeletv1beta1.ImagePullSecret{secretA, copyA}
	if got := rec.CredentialMapping[testRepo].KubernetesSecrets; !reflect.DeepEqual(got, want) {
		t.Errorf("recorded secrets = %+v, want %+v", got, want)
	}
}

func TestMergeCredentials(t *testing.T) {
	rec := &kubeletv1beta1.ImagePulledRecord{ImageRef: testRef}
	if mergeCredentials(rec, testRepo, nil) {
		t.Error("nil credentials changed the record")
	}
	if !mergeCredentials(rec, testRepo, secretUsed(secretB)) || !mergeCredentials(rec, testRepo, secretUsed(secretA)) {
		t.Fatal("new secrets did not change the record")
	}
	if mergeCredentials(rec, testRepo, secretUsed(secretA)) {
		t.Error("a secret already recorded changed the record")
	}
	if got := rec.CredentialMapping[testRepo].KubernetesSecrets; !reflect.DeepEqual(got, []kubeletv1beta1.ImagePullSecret{secretA, secretB}) {
		t.Errorf("secrets = %+v, want sorted by namespace", got)
	}
	rotated := secretA
	rotated.CredentialHash = "hash-new"
	if !mergeCredentials(rec, testRepo, secretUsed(rotated)) || rec.CredentialMapping[testRepo].KubernetesSecrets[0].CredentialHash != "hash-new" {
		t.Errorf("a new hash for a recorded secret was not taken: %+v", rec.CredentialMapping[testRepo])
	}
	anyone := &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	if !mergeCredentials(rec, testRepo, anyone) || !reflect.DeepEqual(rec.CredentialMapping[testRepo], *anyone) {
		t.Errorf("an anonymous pull did not open the image to all: %+v", rec.CredentialMapping[testRepo])
	}
	if mergeCredentials(rec, testRepo, secretUsed(secretB)) {
		t.Error("a secret narrowed an image open to all")
	}
}

func TestUnreadableRecordAsksForAPull(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr := open(t, root, kubeletv1beta1.NeverVerify, nil)
	if err := os.WriteFile(filepath.Join(root, "image_manager", "pulled", hashName(testRef)), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := tr.MustPull(ctx, testImage, testRef, nil); !v.Pull {
		t.Errorf("unreadable record: %+v, want a pull", v)
	}
	// Pulling again writes it anew.
	if err := tr.PullStarting(testImage); err != nil {
		t.Fatal(err)
	}
	tr.Pulled(ctx, testImage, testRef, secretUsed(secretA))
	if v := tr.MustPull(ctx, testImage, testRef, nil); v.Pull {
		t.Errorf("after a new pull under NeverVerify: %+v, want no pull", v)
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	tr := open(t, root, kubeletv1beta1.NeverVerifyPreloadedImages, nil)
	for _, ref := range []string{"sha256:kept", "sha256:gone"} {
		if err := tr.PullStarting(testImage); err != nil {
			t.Fatal(err)
		}
		tr.Pulled(ctx, testImage, ref, secretUsed(secretA))
	}
	// Records written at or after until stay, whatever the list says.
	tr.Prune(ctx, []string{"sha256:kept"}, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if !exists(filepath.Join(root, "image_manager", "pulled", hashName("sha256:gone"))) {
		t.Fatal("a record newer than the list was pruned")
	}
	tr.Prune(ctx, []string{"sha256:kept"}, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	if exists(filepath.Join(root, "image_manager", "pulled", hashName("sha256:gone"))) {
		t.Error("the record of an image no longer present stayed")
	}
	if !exists(filepath.Join(root, "image_manager", "pulled", hashName("sha256:kept"))) {
		t.Error("the record of a present image went")
	}
}
