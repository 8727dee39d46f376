/* One arena per graph: bump allocation from chunks, released all at once.
 * Every byte the library allocates goes through ap_xrealloc, the hook tests
 * use to make allocations fail. */
#define _DEFAULT_SOURCE /* madvise */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ir/ir.h"

static void *default_realloc(void *ptr, size_t size, void *user) {
  (void)user;
  if (size == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, size);
}

static ap_realloc_fn alloc_fn = default_realloc;
static void *alloc_user;

void ap_set_allocator(ap_realloc_fn fn, void *user) {
  alloc_fn = fn ? fn : default_realloc;
  alloc_user = fn ? user : NULL;
}

void *ap_xrealloc(void *ptr, size_t size) { return alloc_fn(ptr, size ? size : 1, alloc_user); }
void ap_xfree(void *ptr) {
  if (ptr)
    alloc_fn(ptr, 0, alloc_user);
}

typedef struct chunk {
  struct chunk *next;
  size_t size, used; /* bytes of data[] */
  _Alignas(16) unsigned char data[];
} chunk;

struct ap_arena {
  chunk *head;
  chunk *spare; /* chunks kept by ap_arena_reset for the allocations that follow */
  size_t grow;  /* the size of the next new chunk: doubling from CHUNK_MIN to CHUNK_MAX */
};

/* Chunks double, so that a plan over a thousand devices (hundreds of
 * blocks of a few hundred KiB: every device's boxes of a node) is carved
 * from a few large chunks on huge pages rather than a mapping per block. */
enum { CHUNK_MIN = 64 * 1024, CHUNK_MAX = 64 << 20, HUGE_CHUNK = 8 << 20 };

/* A large chunk asks for transparent huge pages where the kernel gives
 * them on request: a plan over a thousand devices fills hundreds of
 * megabytes of boxes, and faulting them in 4 KiB at a time took a third
 * of its time. A hint only: nothing changes where it is refused. */
static void want_huge_pages(void *p, size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  uintptr_t page = 2u << 20, lo = ((uintptr_t)p + page - 1) & ~(page - 1);
  uintptr_t hi = ((uintptr_t)p + size) & ~(page - 1);
  if (hi > lo)
    (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)size;
#endif
}

ap_arena *ap_arena_new(void) {
  ap_arena *a = ap_xrealloc(NULL, sizeof *a);
  if (a) {
    a->head = a->spare = NULL;
    a->grow = CHUNK_MIN;
  }
  return a;
}

static void free_chunks(chunk *c) {
  for (chunk *next; c; c = next) {
    next = c->next;
    ap_xfree(c);
  }
}

void ap_arena_free(ap_arena *a) {
  if (!a)
    return;
  free_chunks(a->head);
  free_chunks(a->spare);
  ap_xfree(a);
}

void ap_arena_reset(ap_arena *a) {
  chunk *c = a->head;
  while (c) {
    chunk *next = c->next;
    c->next = a->spare;
    a->spare = c;
    c = next;
  }
  a->head = NULL;
  a->grow = CHUNK_MIN; /* the kept chunks are taken again smallest first (take_spare) */
}

ap_arena_mark ap_arena_mark_now(const ap_arena *a) {
  const chunk *c = a->head;
  return (ap_arena_mark){c, c ? c->next : NULL, c ? c->used : 0, a->grow};
}

/* The chunks taken since the mark go back to the spares, newest first: those
 * on top of the marked chunk, then the large blocks' chunks put behind it
 * (ap_arena_alloc) while it was on top. */
void ap_arena_release(ap_arena *a, ap_arena_mark m) {
  for (chunk **at = &a->head; *at && *at != m.chunk;) {
    chunk *c = *at;
    *at = c->next;
    c->next = a->spare;
    a->spare = c;
  }
  a->grow = m.grow;
  chunk *top = a->head;
  if (!top)
    return;
  while (top->next && top->next != m.next) {
    chunk *c = top->next;
    top->next = c->next;
    c->next = a->spare;
    a->spare = c;
  }
  top->used = m.used;
}

/* The smallest kept chunk of at least `want` bytes, unlinked, or NULL: the
 * smallest, so a large block finds its large chunk again. */
static chunk *take_spare(ap_arena *a, size_t want) {
  chunk **best = NULL;
  for (chunk **at = &a->spare; *at; at = &(*at)->next)
    if ((*at)->size >= want && (!best || (*at)->size < (*best)->size))
      best = at;
  if (!best)
    return NULL;
  chunk *c = *best;
  *best = c->next;
  return c;
}

/* size bytes from the arena, uncleared. */
static void *carve(ap_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (size == 0)
    size = 16;
  chunk *c = a->head;
  if (!c || c->size - c->used < size) {
    size_t want = size > a->grow ? size : a->grow;
    if (want > SIZE_MAX - sizeof(chunk))
      return NULL;
    c = take_spare(a, want);
    /* New chunks go on doubling from the largest taken, unless it was taken
     * for one large block. */
    if (c && want == a->grow && c->size >= a->grow)
      a->grow = c->size < CHUNK_MAX / 2 ? 2 * c->size : CHUNK_MAX;
    if (!c) {
      c = ap_xrealloc(NULL, sizeof(chunk) + want);
      if (!c)
        return NULL;
      c->size = want;
      if (want >= HUGE_CHUNK)
        want_huge_pages(c->data, want);
      if (want == a->grow && a->grow < CHUNK_MAX)
        a->grow *= 2;
    }
    c->used = 0;
    /* A large block gets a chunk of its own behind the current one, so the
     * remaining space of the current chunk is not wasted. */
    if (a->head && want == size && a->head->size - a->head->used >= 256) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += size;
  return p;
}

void *ap_arena_alloc(ap_arena *a, size_t size) {
  void *p = carve(a, size);
  return p ? memset(p, 0, size) : NULL;
}

void *ap_arena_copy(ap_arena *a, const void *src, size_t size) {
  void *p = carve(a, size);
  return p && size ? memcpy(p, src, size) : p;
}

void *ap_arena_array(ap_arena *a, size_t n, size_t elem) {
  if (elem && n > SIZE_MAX / elem)
    return NULL;
  return ap_arena_alloc(a, n * elem);
}

void *ap_arena_array_uncleared(ap_arena *a, size_t n, size_t elem) {
  if (elem && n > SIZE_MAX / elem)
    return NULL;
  return carve(a, n * elem);
}

char *ap_arena_strndup(ap_arena *a, const char *s, size_t n) {
  char *p = ap_arena_alloc(a, n + 1);
  if (p && n)
    memcpy(p, s, n);
  return p;
}

char *ap_arena_strdup(ap_arena *a, const char *s) { return ap_arena_strndup(a, s, strlen(s)); }

char *ap_arena_printf(ap_arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return NULL;
  char *p = ap_arena_alloc(a, (size_t)n + 1);
  if (!p)
    return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

bool ap_arena_grow(ap_arena *a, void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap)
    return true;
  int ncap = *cap ? *cap : 8;
  while (ncap < need) {
    if (ncap > (1 << 29))
      return false;
    ncap *= 2;
  }
  void *p = ap_arena_array(a, (size_t)ncap, elem);
  if (!p)
    return false;
  if (*cap)
    memcpy(p, *arr, (size_t)*cap * elem);
  *arr = p;
  *cap = ncap;
  return true;
}
