package server

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits of a node log query, as the kubelet has them.
const (
	maxQueryTailLines  = 100000
	maxServiceNameLen  = 256
	maxQueryServices   = 4
	journalDateLayout  = "2006-1-2 15:4:5"
	nodeLogQueryBudget = 30 * time.Second
)

// unsafeServiceChars are what a service name may not hold: it is passed
// to journalctl, so only characters that cannot form an option or escape
// are let through.
var unsafeServiceChars = regexp.MustCompile(`[^a-zA-Z\-_.:0-9@]+`)

// logQueryOptions narrow what a service's journal gives; a file query
// takes none of them.
type logQueryOptions struct {
	sinceTime, untilTime *time.Time
	tailLines, boot      *int
	pattern              string
}

func (o logQueryOptions) empty() bool {
	return o.sinceTime == nil && o.untilTime == nil && o.tailLines == nil && o.boot == nil && o.pattern == ""
}

// logQuery is a parsed /logs/?query=... request: the services (journal
// units, or names of log files under the log directory) or the one file
// asked for, and the options.
type logQuery struct {
	services []string
	files    []string
	logQueryOptions
}

// parseLogQuery reads the query parameters of /logs/. It returns nil, and
// no errors, when none of them is set: the request is then for a file by
// its path. The messages are the kubelet's.
func parseLogQuery(q url.Values) (*logQuery, field.ErrorList) {
	var errs field.ErrorList
	var lq logQuery
	queries, ok := q["query"]
	for _, v := range queries {
		// A slash says the query names a file; anything else not blank
		// is a service.
		if strings.ContainsAny(v, `/\`) {
			lq.files = append(lq.files, v)
		} else if strings.TrimSpace(v) != "" {
			lq.services = append(lq.services, v)
		}
	}
	if ok && len(lq.files) == 0 && len(lq.services) == 0 {
		errs = append(errs, field.Invalid(field.NewPath("query"), queries, "may not be empty"))
	}
	parseTime := func(name string) *time.Time {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath(name), v, "invalid time format"))
			return nil
		}
		return &t
	}
	parseInt := func(name string) *int {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath(name), v, err.Error()))
			return nil
		}
		return &n
	}
	lq.sinceTime = parseTime("sinceTime")
	lq.untilTime = parseTime("untilTime")
	lq.boot = parseInt("boot")
	lq.tailLines = parseInt("tailLines")
	lq.pattern = q.Get("pattern")
	if len(errs) > 0 {
		return nil, errs
	}
	if len(lq.services) == 0 && len(lq.files) == 0 && lq.empty() {
		return nil, nil
	}
	return &lq, nil
}

// validate checks a parsed query against the log directory: one file at
// most, which must exist there; services or a file, not both; options
// only with services. The messages are the kubelet's.
func (lq *logQuery) validate(logDir string) field.ErrorList {
	var errs field.ErrorList
	for _, s := range lq.services {
		if err := checkServiceName(s); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("query"), s, err.Error()))
		}
	}
	if len(lq.services) > maxQueryServices {
		errs = append(errs, field.TooMany(field.NewPath("query"), len(lq.services), maxQueryServices))
	}
	switch {
	case len(lq.files) == 0 && len(lq.services) == 0:
		errs = append(errs, field.Required(field.NewPath("query"), "cannot be empty with options"))
	case len(lq.files) > 0 && len(lq.services) > 0:
		errs = append(errs, field.Invalid(field.NewPath("query"), fmt.Sprintf("%v, %v", lq.files, lq.services), "cannot specify a file and service"))
	case len(lq.files) > 1:
		errs = append(errs, field.Invalid(field.NewPath("query"), lq.files, "cannot specify more than one file"))
	case len(lq.files) == 1 && !lq.empty():
		errs = append(errs, field.Invalid(field.NewPath("query"), lq.files, "cannot specify file with options"))
	case len(lq.files) == 1:
		root, err := os.OpenRoot(logDir)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath("query"), lq.files, err.Error()))
			break
		}
		defer func() { _ = root.Close() }()
		if _, err := root.Stat(strings.TrimPrefix(lq.files[0], "/")); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("query"), lq.files, err.Error()))
		}
	}
	if lq.sinceTime != nil && lq.untilTime != nil && lq.sinceTime.After(*lq.untilTime) {
		errs = append(errs, field.Invalid(field.NewPath("untilTime"), lq.untilTime, "must be after `sinceTime`"))
	}
	if lq.boot != nil && *lq.boot > 0 {
		errs = append(errs, field.Invalid(field.NewPath("boot"), *lq.boot, "must be less than 1"))
	}
	if lq.tailLines != nil {
		if msgs := utilvalidation.IsInRange(*lq.tailLines, 0, maxQueryTailLines); len(msgs) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("tailLines"), *lq.tailLines, msgs[0]))
		}
	}
	if _, err := syntax.Parse(lq.pattern, syntax.Perl); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("pattern"), lq.pattern, err.Error()))
	}
	return errs
}

func checkServiceName(s string) error {
	if len(s) > maxServiceNameLen {
		return fmt.Errorf("length must be less than %d", maxServiceNameLen)
	}
	if unsafeServiceChars.MatchString(s) {
		return fmt.Errorf("input contains unsupported characters")
	}
	return nil
}

// journalArgs are journalctl's arguments for the query's services.
func (lq *logQuery) journalArgs(services []string) []string {
	args := []string{"--utc", "--no-pager", "--output=short-precise"}
	if lq.sinceTime != nil {
		args = append(args, "--since="+lq.sinceTime.Format(journalDateLayout))
	}
	if lq.untilTime != nil {
		args = append(args, "--until="+lq.untilTime.Format(journalDateLayout))
	}
	if lq.tailLines != nil {
		args = append(args, "--pager-end", fmt.Sprintf("--lines=%d", *lq.tailLines))
	}
	for _, s := range services {
		args = append(args, "--unit="+s)
	}
	if lq.pattern != "" {
		args = append(args, "--grep="+lq.pattern)
	}
	if lq.boot != nil {
		args = append(args, "--boot", strconv.Itoa(*lq.boot))
	}
	return args
}

// queryContext bounds the whole answer to a log query, as the kubelet's.
func queryContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, nodeLogQueryBudget)
}
