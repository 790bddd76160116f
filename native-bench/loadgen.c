// loadgen: native HTTP/1.1 load generator for native-bench (epoll, N keep-alive connections,
// one request in flight per connection, no pipelining). Closed loop (--closed) or open loop
// (--rate R): open-loop latency is charged from each request's INTENDED send time, so a stalled
// server pays for the queue it causes (coordinated-omission free, like wrk2).
// Invariants: stats exclude the warm-up; every {{seq}} occurrence is unique within a run.
// Never writes anything but the JSON report to stdout; diagnostics go to stderr.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Clock
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *msg) {
  fprintf(stderr, "loadgen: %s\n", msg);
  exit(2);
}

// ---------------------------------------------------------------------------------------------
// Histogram: log-linear buckets, 1 us resolution below 2048 us, then 1024 linear sub-buckets per
// power of two (relative error < 0.1%), up to 2^37 us (~38 h); larger values are clamped.
#define SUB_BITS 10
#define SUB_COUNT (1u << SUB_BITS)
#define MAX_EXP 37
#define BUCKETS ((MAX_EXP - SUB_BITS + 1) * SUB_COUNT)

typedef struct {
  uint64_t counts[BUCKETS];
  uint64_t total;
  uint64_t max;
  double sum;
} histo_t;

static uint32_t bucket_of(uint64_t v) {
  if (v < 2 * SUB_COUNT) return (uint32_t)v;
  int msb = 63 - __builtin_clzll(v);
  if (msb >= MAX_EXP) return BUCKETS - 1;
  int shift = msb - SUB_BITS;
  uint64_t mant = v >> shift;
  return (uint32_t)((shift + 1) * SUB_COUNT + (mant - SUB_COUNT));
}

// Highest value that maps to bucket i (what HdrHistogram calls the highest equivalent value).
static uint64_t bucket_high(uint32_t i) {
  if (i < 2 * SUB_COUNT) return i;
  uint32_t shift = i / SUB_COUNT - 1;
  uint64_t mant = i % SUB_COUNT + SUB_COUNT;
  return ((mant + 1) << shift) - 1;
}

static void histo_record(histo_t *h, uint64_t us) {
  h->counts[bucket_of(us)]++;
  h->total++;
  h->sum += (double)us;
  if (us > h->max) h->max = us;
}

static uint64_t histo_pct(const histo_t *h, double p) {
  if (h->total == 0) return 0;
  uint64_t target = (uint64_t)(p / 100.0 * (double)h->total + 0.999999);
  if (target < 1) target = 1;
  uint64_t seen = 0;
  for (uint32_t i = 0; i < BUCKETS; i++) {
    seen += h->counts[i];
    if (seen >= target) {
      uint64_t v = bucket_high(i);
      return v > h->max ? h->max : v;
    }
  }
  return h->max;
}

static void histo_json(const histo_t *h, const char *name) {
  printf("\"%s\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p999\":%llu,\"max\":%llu,\"mean\":%.1f,"
         "\"count\":%llu}",
         name, (unsigned long long)histo_pct(h, 50), (unsigned long long)histo_pct(h, 90),
         (unsigned long long)histo_pct(h, 99), (unsigned long long)histo_pct(h, 99.9),
         (unsigned long long)h->max, h->total ? h->sum / (double)h->total : 0.0,
         (unsigned long long)h->total);
}

// ---------------------------------------------------------------------------------------------
// Request templates: blocks separated by a line "###". A block is a request line "METHOD PATH",
// header lines, an empty line, then the body (may span lines; the newline before "###" or EOF is
// not part of it). Content-Length and Host are added by the generator.
enum { SEG_LIT, SEG_SEQ, SEG_CUST, SEG_NOW };
typedef struct {
  int kind;
  const char *lit;
  size_t len;
} seg_t;
typedef struct {
  char *head;  // "METHOD PATH HTTP/1.1\r\nHost..\r\nheaders\r\n" without Content-Length/final CRLF
  size_t head_len;
  seg_t *segs;
  int nsegs;
  size_t body_lit_len;  // literal part of the body
  int body_has_body;    // emit Content-Length even for 0 on POST-like methods
} tmpl_t;

static tmpl_t *g_tmpls;
static int g_ntmpls;

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) die("cannot read template file");
  buf[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void parse_body(tmpl_t *t, const char *body, size_t len) {
  int cap = 16;
  t->segs = malloc(sizeof(seg_t) * (size_t)cap);
  t->nsegs = 0;
  t->body_lit_len = 0;
  size_t i = 0, lit_start = 0;
  while (i <= len) {
    int kind = -1;
    size_t plen = 0;
    if (i < len && body[i] == '{' && i + 1 < len && body[i + 1] == '{') {
      if (len - i >= 7 && memcmp(body + i, "{{seq}}", 7) == 0) kind = SEG_SEQ, plen = 7;
      else if (len - i >= 8 && memcmp(body + i, "{{cust}}", 8) == 0) kind = SEG_CUST, plen = 8;
      else if (len - i >= 7 && memcmp(body + i, "{{now}}", 7) == 0) kind = SEG_NOW, plen = 7;
    }
    if (kind >= 0 || i == len) {
      if (t->nsegs + 2 >= cap) {
        cap *= 2;
        t->segs = realloc(t->segs, sizeof(seg_t) * (size_t)cap);
      }
      if (i > lit_start) {
        t->segs[t->nsegs++] = (seg_t){SEG_LIT, body + lit_start, i - lit_start};
        t->body_lit_len += i - lit_start;
      }
      if (kind >= 0) t->segs[t->nsegs++] = (seg_t){kind, NULL, 0};
      if (i == len) break;
      i += plen;
      lit_start = i;
      continue;
    }
    i++;
  }
}

static void load_templates(const char *path, const char *host_hdr) {
  size_t len;
  char *src = read_file(path, &len);
  if (!src) die("cannot open template file");
  int cap = 8;
  g_tmpls = calloc((size_t)cap, sizeof(tmpl_t));
  char *p = src, *end = src + len;
  while (p < end) {
    // Find block end: a line that is exactly "###".
    char *blk_end = end, *next = end;
    for (char *q = p; q < end;) {
      char *nl = memchr(q, '\n', (size_t)(end - q));
      char *le = nl ? nl : end;
      size_t ll = (size_t)(le - q);
      if (ll > 0 && q[ll - 1] == '\r') ll--;
      if (ll == 3 && memcmp(q, "###", 3) == 0) {
        blk_end = q;
        next = nl ? nl + 1 : end;
        break;
      }
      q = nl ? nl + 1 : end;
    }
    // Skip blocks that are only whitespace.
    char *s = p;
    while (s < blk_end && (*s == '\n' || *s == '\r' || *s == ' ')) s++;
    if (s < blk_end) {
      if (g_ntmpls == cap) {
        cap *= 2;
        g_tmpls = realloc(g_tmpls, sizeof(tmpl_t) * (size_t)cap);
      }
      tmpl_t *t = &g_tmpls[g_ntmpls++];
      memset(t, 0, sizeof *t);
      // Request line.
      char *nl = memchr(s, '\n', (size_t)(blk_end - s));
      if (!nl) die("template without header terminator");
      size_t rl = (size_t)(nl - s);
      if (rl && s[rl - 1] == '\r') rl--;
      size_t hcap = 4096 + (size_t)(blk_end - s);
      t->head = malloc(hcap);
      int n = snprintf(t->head, hcap, "%.*s HTTP/1.1\r\n", (int)rl, s);
      t->head_len = (size_t)n;
      int has_host = 0;
      char *q = nl + 1;
      char *body = NULL;
      while (q < blk_end) {
        char *hl_end = memchr(q, '\n', (size_t)(blk_end - q));
        if (!hl_end) hl_end = blk_end;
        size_t hl = (size_t)(hl_end - q);
        if (hl && q[hl - 1] == '\r') hl--;
        if (hl == 0) {
          body = hl_end < blk_end ? hl_end + 1 : blk_end;
          break;
        }
        if (hl >= 5 && strncasecmp(q, "host:", 5) == 0) has_host = 1;
        memcpy(t->head + t->head_len, q, hl);
        t->head_len += hl;
        memcpy(t->head + t->head_len, "\r\n", 2);
        t->head_len += 2;
        q = hl_end + 1;
      }
      if (!has_host) {
        n = snprintf(t->head + t->head_len, hcap - t->head_len, "Host: %s\r\n", host_hdr);
        t->head_len += (size_t)n;
      }
      size_t blen = 0;
      if (body && body < blk_end) {
        blen = (size_t)(blk_end - body);
        // The newline before "###" (or the file's final newline) is not part of the body.
        if (blen && body[blen - 1] == '\n') blen--;
        if (blen && body[blen - 1] == '\r') blen--;
      } else {
        body = blk_end;
      }
      t->body_has_body = !(rl >= 3 && (strncmp(s, "GET", 3) == 0 || strncmp(s, "HEAD", 4) == 0)) ||
                         blen > 0;
      parse_body(t, body, blen);
    }
    p = next;
  }
  if (g_ntmpls == 0) die("template file holds no request");
}

// ---------------------------------------------------------------------------------------------
// Placeholder values
static uint64_t g_seq;           // next {{seq}} value
static uint64_t g_customers = 1000000;
static uint64_t g_cust_next;     // sequential customer order
static int g_cust_sequential;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static char g_now_buf[32];
static time_t g_now_sec = -1;
static int g_now_ms = -1;

static uint64_t rng_next(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static const char *now_rfc3339(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int ms = (int)(ts.tv_nsec / 1000000);
  if (ts.tv_sec != g_now_sec || ms != g_now_ms) {
    if (ts.tv_sec != g_now_sec) {
      struct tm tm;
      gmtime_r(&ts.tv_sec, &tm);
      strftime(g_now_buf, sizeof g_now_buf, "%Y-%m-%dT%H:%M:%S", &tm);
      g_now_sec = ts.tv_sec;
    }
    snprintf(g_now_buf + 19, sizeof g_now_buf - 19, ".%03dZ", ms);
    g_now_ms = ms;
  }
  return g_now_buf;
}

static size_t u64_to_str(uint64_t v, char *out) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

// ---------------------------------------------------------------------------------------------
// Connections
typedef struct {
  int fd;
  int id;
  int connecting;
  int busy;          // a request is in flight (or queued for write)
  int want_out;      // EPOLLOUT registered
  char *wbuf;
  size_t wcap, wlen, woff;
  char *rbuf;
  size_t rcap, rlen;
  uint64_t sent_ns;     // actual send time
  uint64_t intended_ns; // intended send time (open loop) or = sent_ns (closed)
  uint64_t deadline_ns; // for the response timeout
  int next_free;        // free-list link
  int in_free;          // on the free list (idle, connected)
} conn_t;

static conn_t *g_conns;
static int g_nconns = 64;
static int g_ep;
static struct sockaddr_in g_addr;
static int g_tmpl_next;

// Options and run state
static int g_open_loop;
static double g_rate;
static double g_duration_s = 10, g_warmup_s = 2, g_timeout_s = 10, g_drain_s = 5;
static uint64_t g_max_requests;  // 0 = unlimited
static int g_expect = 0;
static const char *g_fail_body;  // a response body holding this counts as unexpected
static uint64_t g_fail_body_hits;
static uint64_t g_t0, g_measure_start, g_end;
static int g_stopping;
static uint64_t g_sent, g_completed, g_measured_sent;
// Responses that arrived inside the measured window, whenever they were intended: the throughput.
// (Under an overloaded open loop the requests answered in the window were mostly intended during
// the warm-up, so counting by intended time would report far less than the server served.)
static uint64_t g_window_responses;
static uint64_t g_status[600];
static uint64_t g_err_connect, g_err_read, g_err_write, g_err_timeout, g_err_parse, g_err_closed;
static uint64_t g_unexpected;
static uint64_t g_unsent_recorded;  // open loop: never-sent requests charged in the histogram
static char g_unexpected_sample[600];
static int g_unexpected_sample_status;
static histo_t g_hist, g_svc_hist;
static uint64_t g_events_next;   // open loop: index of the next intended request
static uint64_t g_interval_ns;
static int g_free_head = -1;
static int g_timer_fd;
static uint64_t g_timer_armed_for;
static volatile sig_atomic_t g_interrupted;

static void ep_mod(conn_t *c, int out) {
  struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.u32 = (uint32_t)c->id};
  if (epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl mod");
  c->want_out = out;
}

static void conn_open(conn_t *c) {
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) die("socket");
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->connecting = 1;
  c->rlen = 0;
  c->wlen = c->woff = 0;
  int r = connect(c->fd, (struct sockaddr *)&g_addr, sizeof g_addr);
  if (r < 0 && errno != EINPROGRESS) {
    g_err_connect++;
  }
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = (uint32_t)c->id};
  if (epoll_ctl(g_ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl add");
  c->want_out = 1;
}

static void free_push(conn_t *c) {
  if (c->in_free) return;
  c->in_free = 1;
  c->next_free = g_free_head;
  g_free_head = c->id;
}

static conn_t *free_pop(void) {
  if (g_free_head < 0) return NULL;
  conn_t *c = &g_conns[g_free_head];
  g_free_head = c->next_free;
  c->in_free = 0;
  return c;
}

// An idle connection closed by the server leaves the free list until it is connected again.
static void free_remove(conn_t *c) {
  if (!c->in_free) return;
  int *link = &g_free_head;
  while (*link >= 0 && *link != c->id) link = &g_conns[*link].next_free;
  if (*link == c->id) *link = c->next_free;
  c->in_free = 0;
}

static void wbuf_reserve(conn_t *c, size_t need) {
  if (c->wcap >= need) return;
  while (c->wcap < need) c->wcap = c->wcap ? c->wcap * 2 : 8192;
  c->wbuf = realloc(c->wbuf, c->wcap);
}

// Renders the next template into the connection's write buffer.
static void build_request(conn_t *c) {
  tmpl_t *t = &g_tmpls[g_tmpl_next];
  g_tmpl_next = (g_tmpl_next + 1) % g_ntmpls;
  size_t body_max = t->body_lit_len + (size_t)t->nsegs * 32;
  wbuf_reserve(c, t->head_len + 64 + body_max);
  // Body is rendered after room for head + Content-Length, then moved into place.
  char *body = c->wbuf + t->head_len + 48;
  size_t bl = 0;
  for (int i = 0; i < t->nsegs; i++) {
    seg_t *s = &t->segs[i];
    switch (s->kind) {
      case SEG_LIT:
        memcpy(body + bl, s->lit, s->len);
        bl += s->len;
        break;
      case SEG_SEQ:
        bl += u64_to_str(g_seq++, body + bl);
        break;
      case SEG_CUST: {
        uint64_t v;
        if (g_cust_sequential) {
          v = g_cust_next++ % g_customers;
        } else {
          v = rng_next() % g_customers;
        }
        bl += u64_to_str(v, body + bl);
        break;
      }
      case SEG_NOW:
        memcpy(body + bl, now_rfc3339(), 24);
        bl += 24;
        break;
    }
  }
  char clh[48];
  int cl = t->body_has_body ? snprintf(clh, sizeof clh, "Content-Length: %zu\r\n\r\n", bl)
                            : snprintf(clh, sizeof clh, "\r\n");
  memcpy(c->wbuf, t->head, t->head_len);
  memcpy(c->wbuf + t->head_len, clh, (size_t)cl);
  memmove(c->wbuf + t->head_len + (size_t)cl, body, bl);
  c->wlen = t->head_len + (size_t)cl + bl;
  c->woff = 0;
}

static void conn_reset(conn_t *c);

static void conn_flush(conn_t *c) {
  while (c->woff < c->wlen) {
    ssize_t n = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);
    if (n > 0) {
      c->woff += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!c->want_out) ep_mod(c, 1);
      return;
    }
    if (n < 0 && errno == EINTR) continue;
    g_err_write++;
    conn_reset(c);
    return;
  }
  if (c->want_out) ep_mod(c, 0);
}

static void send_request(conn_t *c, uint64_t intended) {
  build_request(c);
  uint64_t t = now_ns();
  c->busy = 1;
  c->sent_ns = t;
  c->intended_ns = intended ? intended : t;
  c->deadline_ns = t + (uint64_t)(g_timeout_s * 1e9);
  g_sent++;
  if (c->intended_ns >= g_measure_start) g_measured_sent++;
  conn_flush(c);
}

static int can_send_more(void) {
  if (g_stopping) return 0;
  if (g_max_requests && g_sent >= g_max_requests) return 0;
  return 1;
}

// Wake-up for the next intended send. With epoll_pwait2 (Linux 5.11+) the wait itself takes a ns
// timeout, saving two syscalls per request; otherwise an absolute timerfd is armed.
static int g_use_pwait2 = 1;
static uint64_t g_wake_at;  // 0 = no scheduled wake-up

static void arm_timer_fd(uint64_t at_ns) {
  if (g_timer_armed_for == at_ns) return;
  struct itimerspec its = {0};
  its.it_value.tv_sec = (time_t)(at_ns / 1000000000ull);
  its.it_value.tv_nsec = (long)(at_ns % 1000000000ull);
  timerfd_settime(g_timer_fd, TFD_TIMER_ABSTIME, &its, NULL);  // at_ns == 0 disarms
  g_timer_armed_for = at_ns;
}

static void arm_timer(uint64_t at_ns) {
  g_wake_at = at_ns;
  if (!g_use_pwait2) arm_timer_fd(at_ns);
}

static int wait_events(struct epoll_event *evs, int max, uint64_t now, uint64_t cap_ns) {
  uint64_t timeout_ns = cap_ns;
  if (g_wake_at) timeout_ns = g_wake_at > now ? g_wake_at - now : 0;
  if (timeout_ns > cap_ns) timeout_ns = cap_ns;
  if (g_use_pwait2) {
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    int n = epoll_pwait2(g_ep, evs, max, &ts, NULL);
    if (n >= 0 || errno != ENOSYS) return n;
    g_use_pwait2 = 0;  // old kernel: fall back to the timerfd
    if (g_wake_at) arm_timer_fd(g_wake_at);
  }
  // The timerfd armed in arm_timer wakes us for the next send; the cap bounds housekeeping.
  return epoll_wait(g_ep, evs, max, (int)(cap_ns / 1000000));
}

// Open loop: hand every due intended request to a free connection; arm the timer for the next.
static void dispatch_open(void) {
  uint64_t t = now_ns();
  while (can_send_more()) {
    uint64_t intended = g_t0 + g_events_next * g_interval_ns;
    if (intended >= g_end) break;
    if (intended > t) {
      if (g_free_head >= 0) arm_timer(intended);
      return;
    }
    conn_t *c = free_pop();
    if (!c) return;  // backlog: the request keeps its intended time and waits for a connection
    g_events_next++;
    send_request(c, intended);
  }
}

// Closed loop: every free connection sends at once.
static void dispatch_closed(void) {
  conn_t *c;
  while (can_send_more() && (c = free_pop())) send_request(c, 0);
}

static void dispatch(void) {
  if (g_open_loop) dispatch_open();
  else dispatch_closed();
}

static void record_error_in_flight(conn_t *c) {
  if (c->busy) {
    c->busy = 0;
    g_completed++;
  }
}

// Drops the connection (its in-flight request, if any, is already counted as an error) and dials
// again unless the run is over.
static void conn_reset(conn_t *c) {
  record_error_in_flight(c);
  free_remove(c);
  epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
  if (!g_stopping) conn_open(c);
}

static void json_escape_into(char *dst, size_t cap, const char *src, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < len && o + 8 < cap; i++) {
    unsigned char ch = (unsigned char)src[i];
    if (ch == '"' || ch == '\\') {
      dst[o++] = '\\';
      dst[o++] = (char)ch;
    } else if (ch < 0x20 || ch >= 0x7f) {
      o += (size_t)snprintf(dst + o, cap - o, "\\u%04x", ch);
    } else {
      dst[o++] = (char)ch;
    }
  }
  dst[o] = 0;
}

static void on_response(conn_t *c, int status, const char *body, size_t blen) {
  uint64_t t = now_ns();
  c->busy = 0;
  g_completed++;
  if (t >= g_measure_start && t <= g_end) g_window_responses++;
  if (c->intended_ns >= g_measure_start) {
    if (status >= 0 && status < 600) g_status[status]++;
    histo_record(&g_hist, (t - c->intended_ns) / 1000);
    if (g_open_loop) histo_record(&g_svc_hist, (t - c->sent_ns) / 1000);
    int bad_status = g_expect && status != g_expect;
    int bad_body = g_fail_body && blen && memmem(body, blen, g_fail_body, strlen(g_fail_body));
    if (bad_body) g_fail_body_hits++;
    if (bad_status || bad_body) {
      g_unexpected++;
      if (!g_unexpected_sample_status) {
        g_unexpected_sample_status = status;
        json_escape_into(g_unexpected_sample, sizeof g_unexpected_sample, body,
                         blen > 300 ? 300 : blen);
      }
    }
  }
}

// Consumes one parsed response of `total` bytes; returns 2 when the server asked to close (the
// connection is then replaced), 1 otherwise.
static int finish_response(conn_t *c, size_t total, int conn_close) {
  if (c->rlen > total) memmove(c->rbuf, c->rbuf + total, c->rlen - total);
  c->rlen -= total;
  if (conn_close) {
    g_err_closed++;
    conn_reset(c);
    return 2;
  }
  free_push(c);
  return 1;
}

static const char *find_crlfcrlf(const char *p, size_t n) {
  for (size_t i = 3; i < n; i++)
    if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r') return p + i + 1;
  return NULL;
}

// Tries to parse one complete response from rbuf. Returns 1 done, 2 done and connection replaced,
// 0 need more, -1 malformed.
static int try_parse(conn_t *c) {
  const char *p = c->rbuf;
  size_t n = c->rlen;
  const char *hend = find_crlfcrlf(p, n);
  if (!hend) return n > 65536 ? -1 : 0;
  if (n < 12 || memcmp(p, "HTTP/1.", 7) != 0) return -1;
  int status = atoi(p + 9);
  size_t hlen = (size_t)(hend - p);
  long long clen = -1;
  int chunked = 0, conn_close = 0;
  // Header scan (line by line, case-insensitive names).
  const char *q = memchr(p, '\n', hlen) + 1;
  while (q < hend - 2) {
    const char *le = memchr(q, '\n', (size_t)(hend - q));
    size_t ll = (size_t)(le - q);
    if (ll >= 15 && strncasecmp(q, "content-length:", 15) == 0) clen = atoll(q + 15);
    else if (ll >= 18 && strncasecmp(q, "transfer-encoding:", 18) == 0 &&
             memmem(q, ll, "chunked", 7))
      chunked = 1;
    else if (ll >= 11 && strncasecmp(q, "connection:", 11) == 0 && memmem(q, ll, "close", 5))
      conn_close = 1;
    q = le + 1;
  }
  const char *body = hend;
  size_t avail = n - hlen;
  if (chunked) {
    // Walk chunks; the body reported for samples is the raw chunked text.
    size_t off = 0;
    for (;;) {
      const char *cl_end = memmem(body + off, avail - off, "\r\n", 2);
      if (!cl_end) return 0;
      unsigned long sz = strtoul(body + off, NULL, 16);
      size_t after = (size_t)(cl_end - body) + 2;
      if (sz == 0) {
        // Skip trailers up to the empty line.
        const char *tend = memmem(body + after - 2, avail - (after - 2), "\r\n\r\n", 4);
        if (!tend) return 0;
        size_t total = (size_t)(tend - p) + 4;
        on_response(c, status, body, after);
        return finish_response(c, total, conn_close);
      }
      if (avail < after + sz + 2) return 0;
      off = after + sz + 2;
    }
  }
  if (clen < 0) {
    if (status == 204 || status == 304 || (status >= 100 && status < 200)) clen = 0;
    else return -1;  // read-until-close bodies are not supported with keep-alive
  }
  if (avail < (size_t)clen) return 0;
  size_t total = hlen + (size_t)clen;
  on_response(c, status, body, (size_t)clen);
  return finish_response(c, total, conn_close);
}

static void conn_readable(conn_t *c) {
  for (;;) {
    if (c->rcap - c->rlen < 16384) {
      c->rcap = c->rcap ? c->rcap * 2 : 32768;
      c->rbuf = realloc(c->rbuf, c->rcap);
    }
    size_t space = c->rcap - c->rlen;
    ssize_t n = read(c->fd, c->rbuf + c->rlen, space);
    if (n > 0) {
      c->rlen += (size_t)n;
      int r = 0;
      while (c->rlen && (r = try_parse(c)) == 1) {
      }
      if (r == 2) return;
      if (r < 0) {
        g_err_parse++;
        conn_reset(c);
        return;
      }
      if ((size_t)n < space) return;  // drained the socket
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    // EOF or error: an in-flight request is lost.
    if (c->busy) g_err_read++;
    conn_reset(c);
    return;
  }
}

static void on_sigint(int sig) {
  (void)sig;
  g_interrupted = 1;
}

static void usage(void) {
  fprintf(stderr,
          "usage: loadgen --port P [--host 127.0.0.1] --requests-file F (--closed | --rate R)\n"
          "  [--connections N=64] [--duration S=10] [--warmup S=2] [--timeout S=10]\n"
          "  [--max-requests N] [--customers N=1000000] [--cust-order random|seq]\n"
          "  [--seq-start N] [--seed N] [--expect STATUS] [--fail-body SUBSTRING] [--drain S=5]\n"
          "  [--timerfd]  (wake up by timerfd instead of epoll_pwait2)\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *file = NULL;
  int port = 0, closed = 0;
  uint64_t seed = 0;
  int seq_given = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && (i++, 1))
    if (strcmp(a, "--closed") == 0) closed = 1;
    else if (ARG("--rate")) g_rate = atof(v);
    else if (ARG("--host")) host = v;
    else if (ARG("--port")) port = atoi(v);
    else if (ARG("--requests-file")) file = v;
    else if (ARG("--connections")) g_nconns = atoi(v);
    else if (ARG("--duration")) g_duration_s = atof(v);
    else if (ARG("--warmup")) g_warmup_s = atof(v);
    else if (ARG("--timeout")) g_timeout_s = atof(v);
    else if (ARG("--drain")) g_drain_s = atof(v);
    else if (ARG("--max-requests")) g_max_requests = strtoull(v, NULL, 10);
    else if (ARG("--customers")) g_customers = strtoull(v, NULL, 10);
    else if (ARG("--cust-order")) g_cust_sequential = strcmp(v, "seq") == 0;
    else if (ARG("--seq-start")) g_seq = strtoull(v, NULL, 10), seq_given = 1;
    else if (ARG("--seed")) seed = strtoull(v, NULL, 10);
    else if (ARG("--expect")) g_expect = atoi(v);
    else if (ARG("--fail-body")) g_fail_body = v;
    else if (strcmp(a, "--timerfd") == 0) g_use_pwait2 = 0;  // force the pre-5.11 wake-up path
    else usage();
#undef ARG
  }
  if (!port || !file || (closed == (g_rate > 0)) || g_nconns < 1 || g_customers < 1) usage();
  g_open_loop = !closed;
  if (!seq_given) {
    // Unique across runs against the same server: microseconds since the epoch.
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g_seq = (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
  }
  if (seed) g_rng = seed * 0x9E3779B97F4A7C15ull | 1;
  else g_rng ^= now_ns();

  char host_hdr[300];
  snprintf(host_hdr, sizeof host_hdr, "%s:%d", host, port);
  load_templates(file, host_hdr);

  memset(&g_addr, 0, sizeof g_addr);
  g_addr.sin_family = AF_INET;
  g_addr.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, host, &g_addr.sin_addr) != 1) {
    struct hostent *he = gethostbyname(host);
    if (!he) die("cannot resolve host");
    memcpy(&g_addr.sin_addr, he->h_addr_list[0], sizeof g_addr.sin_addr);
  }

  // Default timer slack (50 us) would make every scheduled send late by up to that much, and
  // open-loop latency is charged from the intended time: ask for 1 ns.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, on_sigint);
  signal(SIGTERM, on_sigint);
  g_ep = epoll_create1(EPOLL_CLOEXEC);
  g_timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  struct epoll_event tev = {.events = EPOLLIN, .data.u32 = 0xFFFFFFFFu};
  epoll_ctl(g_ep, EPOLL_CTL_ADD, g_timer_fd, &tev);

  g_conns = calloc((size_t)g_nconns, sizeof(conn_t));
  for (int i = 0; i < g_nconns; i++) {
    g_conns[i].id = i;
    conn_open(&g_conns[i]);
  }

  // Wait for every connection before the clock starts, so the schedule does not begin with a
  // backlog caused by our own connection set-up.
  uint64_t connect_deadline = now_ns() + 5000000000ull;
  int connected = 0;
  struct epoll_event evs[256];
  while (connected < g_nconns) {
    if (now_ns() > connect_deadline || g_interrupted) die("could not connect every connection");
    int n = epoll_wait(g_ep, evs, 256, 100);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u32 == 0xFFFFFFFFu) continue;
      conn_t *c = &g_conns[evs[i].data.u32];
      if (!c->connecting) continue;
      int err = 0;
      socklen_t el = sizeof err;
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
      if (err || (evs[i].events & (EPOLLERR | EPOLLHUP))) {
        fprintf(stderr, "loadgen: connect failed: %s\n", strerror(err ? err : ECONNREFUSED));
        exit(3);
      }
      c->connecting = 0;
      ep_mod(c, 0);
      connected++;
    }
  }

  g_t0 = now_ns();
  g_measure_start = g_t0 + (uint64_t)(g_warmup_s * 1e9);
  uint64_t run_ns = (uint64_t)((g_warmup_s + g_duration_s) * 1e9);
  if (g_max_requests && g_duration_s <= 0) run_ns = 3600ull * 1000000000ull;  // count-bounded
  g_end = g_t0 + run_ns;
  if (g_open_loop) {
    g_interval_ns = (uint64_t)(1e9 / g_rate);
    if (g_interval_ns == 0) g_interval_ns = 1;
  }
  for (int i = g_nconns - 1; i >= 0; i--) free_push(&g_conns[i]);
  dispatch();

  uint64_t drain_end = 0, last_timeout_scan = g_t0;
  for (;;) {
    uint64_t t = now_ns();
    if (!g_stopping && (t >= g_end || g_interrupted || (g_max_requests && g_sent >= g_max_requests))) {
      g_stopping = 1;
      drain_end = t + (uint64_t)(g_drain_s * 1e9);
      arm_timer(0);
    }
    if (g_stopping) {
      int busy = 0;
      for (int i = 0; i < g_nconns; i++) busy += g_conns[i].busy && g_conns[i].fd >= 0;
      if (!busy || t >= drain_end || g_interrupted > 1) break;
    }
    // Response timeouts, scanned every 100 ms.
    if (t - last_timeout_scan > 100000000ull) {
      last_timeout_scan = t;
      for (int i = 0; i < g_nconns; i++) {
        conn_t *c = &g_conns[i];
        if (c->busy && c->fd >= 0 && t > c->deadline_ns) {
          g_err_timeout++;
          conn_reset(c);
        }
      }
    }
    uint64_t cap_ns = 50000000ull;
    if (!g_stopping && g_end > t && g_end - t < cap_ns) cap_ns = g_end - t;
    int n = wait_events(evs, 256, t, cap_ns);
    if (g_wake_at && g_wake_at <= now_ns()) g_wake_at = 0;  // dispatch() sets the next one
    if (n < 0 && errno != EINTR) die("epoll_wait");
    for (int i = 0; i < n; i++) {
      uint32_t id = evs[i].data.u32;
      if (id == 0xFFFFFFFFu) {
        uint64_t exp;
        if (read(g_timer_fd, &exp, sizeof exp) < 0) { /* spurious wake-up */ }
        g_timer_armed_for = 0;
        continue;
      }
      conn_t *c = &g_conns[id];
      if (c->fd < 0) continue;
      if (c->connecting) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err || (evs[i].events & (EPOLLERR | EPOLLHUP))) {
          g_err_connect++;
          epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);
          close(c->fd);
          c->fd = -1;
          if (!g_stopping) conn_open(c);
          continue;
        }
        c->connecting = 0;
        ep_mod(c, 0);
        free_push(c);
        continue;
      }
      if (evs[i].events & EPOLLOUT) conn_flush(c);
      if (c->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) conn_readable(c);
    }
    dispatch();
  }
  uint64_t t_end = now_ns();

  // Requests whose intended time fell inside the run but never got a connection (open loop).
  uint64_t backlog = 0;
  if (g_open_loop) {
    uint64_t stop_at = t_end < g_end ? t_end : g_end;
    uint64_t due = stop_at > g_t0 ? (stop_at - g_t0) / g_interval_ns + 1 : 0;
    if (g_max_requests && due > g_max_requests) due = g_max_requests;
    backlog = due > g_events_next ? due - g_events_next : 0;
    // Requests that were due but never sent still happened to the client: charge each with the
    // lower bound of its latency (end of run minus intended time), so an overloaded server cannot
    // look fast by answering only a few requests.
    for (uint64_t k = g_events_next; k < g_events_next + backlog; k++) {
      uint64_t intended = g_t0 + k * g_interval_ns;
      if (intended < g_measure_start) continue;
      histo_record(&g_hist, (t_end - intended) / 1000);
      g_unsent_recorded++;
    }
  }
  uint64_t in_flight = 0;
  for (int i = 0; i < g_nconns; i++) in_flight += g_conns[i].busy && g_conns[i].fd >= 0;

  uint64_t responses = 0;
  for (int i = 0; i < 600; i++) responses += g_status[i];
  double measured_s;
  if (g_max_requests && g_duration_s <= 0) {
    measured_s = (double)(t_end - g_measure_start) / 1e9;
  } else {
    uint64_t stop = g_end < t_end ? g_end : t_end;
    measured_s = stop > g_measure_start ? (double)(stop - g_measure_start) / 1e9 : 0;
  }
  if (measured_s <= 0) measured_s = 1e-9;
  uint64_t errors = g_err_connect + g_err_read + g_err_write + g_err_timeout + g_err_parse +
                    in_flight;

  printf("{\"mode\":\"%s\",", g_open_loop ? "open" : "closed");
  if (g_open_loop) printf("\"target_rate\":%.1f,", g_rate);
  printf("\"connections\":%d,\"duration_s\":%.3f,\"warmup_s\":%.3f,", g_nconns, measured_s,
         g_warmup_s);
  printf("\"requests\":%llu,\"responses\":%llu,", (unsigned long long)g_measured_sent,
         (unsigned long long)responses);
  printf("\"responses_by_status\":{");
  int first = 1;
  for (int i = 0; i < 600; i++) {
    if (!g_status[i]) continue;
    printf("%s\"%d\":%llu", first ? "" : ",", i, (unsigned long long)g_status[i]);
    first = 0;
  }
  printf("},\"errors\":%llu,", (unsigned long long)errors);
  printf("\"error_detail\":{\"connect\":%llu,\"read\":%llu,\"write\":%llu,\"timeout\":%llu,"
         "\"parse\":%llu,\"unanswered_at_end\":%llu,\"server_closed\":%llu},",
         (unsigned long long)g_err_connect, (unsigned long long)g_err_read,
         (unsigned long long)g_err_write, (unsigned long long)g_err_timeout,
         (unsigned long long)g_err_parse, (unsigned long long)in_flight,
         (unsigned long long)g_err_closed);
  if (g_fail_body) printf("\"fail_body_hits\":%llu,", (unsigned long long)g_fail_body_hits);
  if (g_expect || g_fail_body) {
    printf("\"expect\":%d,\"unexpected\":%llu,", g_expect, (unsigned long long)g_unexpected);
    if (g_unexpected_sample_status)
      printf("\"unexpected_sample\":{\"status\":%d,\"body\":\"%s\"},", g_unexpected_sample_status,
             g_unexpected_sample);
  }
  if (g_open_loop)
    printf("\"backlog_at_end\":%llu,\"unsent_recorded\":%llu,", (unsigned long long)backlog,
           (unsigned long long)g_unsent_recorded);
  printf("\"rps\":%.1f,", (double)g_window_responses / measured_s);
  histo_json(&g_hist, "latency_us");
  if (g_open_loop) {
    printf(",");
    histo_json(&g_svc_hist, "service_time_us");
  }
  printf(",\"seq_next\":%llu,\"interrupted\":%s}\n", (unsigned long long)g_seq,
         g_interrupted ? "true" : "false");
  return 0;
}
