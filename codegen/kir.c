/* Kernels as loop nests (codegen.h, "kir.c"): the types, the builder the
 * operator emitters call, and the structural comparison that keeps one
 * definition per distinct kernel.
 *
 * The builder makes C's conversions explicit: a binary operator promotes
 * both operands (integer promotions, then the usual arithmetic
 * conversions) and records the casts, an assignment converts to the
 * destination's type, a math function of a float operand is the float
 * variant (expf) and of anything else the double one. Expressions are trees:
 * a value used twice is a local variable. Out of memory while building
 * sets k->oom and hands out a placeholder, so emitters need no checks; the
 * lowering reports it. */
#include <math.h>
#include <string.h>

#include "codegen/codegen.h"

/* ---- types ------------------------------------------------------------------ */

cg_ty cg_ty_of(ap_dtype t) {
  switch (t) {
  case AP_DT_FLOAT: return CG_T_F32;
  case AP_DT_DOUBLE: return CG_T_F64;
  case AP_DT_INT8: return CG_T_I8;
  case AP_DT_UINT8: return CG_T_U8;
  case AP_DT_INT16: return CG_T_I16;
  case AP_DT_UINT16: return CG_T_U16;
  case AP_DT_INT32: return CG_T_I32;
  case AP_DT_UINT32: return CG_T_U32;
  case AP_DT_INT64: return CG_T_I64;
  case AP_DT_UINT64: return CG_T_U64;
  case AP_DT_BOOL: return CG_T_U8;
  default: return CG_T_VOID;
  }
}

const char *cg_ty_c(cg_ty t) {
  static const char *const names[] = {"void",    "int",      "int8_t",  "uint8_t", "int16_t",
                                      "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
                                      "float",   "double",   "void *"};
  return names[t];
}

bool cg_ty_float(cg_ty t) { return t == CG_T_F32 || t == CG_T_F64; }

bool cg_ty_signed(cg_ty t) {
  return t == CG_T_I8 || t == CG_T_I16 || t == CG_T_I32 || t == CG_T_I64 || t == CG_T_BOOL;
}

int cg_ty_bits(cg_ty t) {
  switch (t) {
  case CG_T_BOOL: return 32;
  case CG_T_I8: case CG_T_U8: return 8;
  case CG_T_I16: case CG_T_U16: return 16;
  case CG_T_I32: case CG_T_U32: case CG_T_F32: return 32;
  default: return 64;
  }
}

/* ---- building ---------------------------------------------------------------- */

static cg_x oom_x; /* handed out when out of memory; the kernel is discarded */
static cg_s oom_s;

static cg_x *new_x(cg_kernel *k, cg_xop op, cg_ty ty) {
  cg_x *x = k->oom ? NULL : ap_arena_alloc(k->g->arena, sizeof *x);
  if (!x) {
    k->oom = true;
    memset(&oom_x, 0, sizeof oom_x);
    oom_x.ty = (uint8_t)ty;
    return &oom_x;
  }
  x->op = (uint8_t)op;
  x->ty = (uint8_t)ty;
  return x;
}

static cg_s *new_s(cg_kernel *k, cg_sop op) {
  cg_s *s = k->oom ? NULL : ap_arena_alloc(k->g->arena, sizeof *s);
  if (!s) {
    k->oom = true;
    memset(&oom_s, 0, sizeof oom_s);
    return &oom_s;
  }
  s->op = (uint8_t)op;
  s->var = -1;
  *k->tail = s;
  k->tail = &s->next;
  return s;
}

cg_x *cg_const(cg_kernel *k, cg_ty ty, double v) {
  cg_x *x = new_x(k, CG_X_CONST, ty);
  if (cg_ty_float(ty)) {
    x->f = ty == CG_T_F32 ? (double)(float)v : v;
  } else if (ty == CG_T_U64) {
    x->i = (int64_t)(v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX : (uint64_t)v);
  } else {
    x->i = v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
  }
  return x;
}

cg_x *cg_i64(cg_kernel *k, int64_t v) {
  cg_x *x = new_x(k, CG_X_CONST, CG_T_I64);
  x->i = v;
  return x;
}

cg_x *cg_int(cg_kernel *k, int64_t v) {
  cg_x *x = new_x(k, CG_X_CONST, CG_T_I32);
  x->i = v;
  return x;
}

cg_x *cg_u64(cg_kernel *k, uint64_t v) {
  cg_x *x = new_x(k, CG_X_CONST, CG_T_U64);
  x->i = (int64_t)v;
  return x;
}

cg_x *cg_f32(cg_kernel *k, double v) { return cg_const(k, CG_T_F32, v); }
cg_x *cg_f64(cg_kernel *k, double v) { return cg_const(k, CG_T_F64, v); }

cg_x *cg_lit(cg_kernel *k, ap_dtype t, double v) { return cg_const(k, cg_ty_of(t), v); }

cg_x *cg_v(cg_kernel *k, int var) {
  const cg_var *vr = &k->ir->vars[var];
  cg_x *x = new_x(k, CG_X_VAR, (cg_ty)vr->ty);
  x->id = var;
  x->elem = vr->elem;
  x->is_const = vr->is_const;
  return x;
}

static cg_x *param(cg_kernel *k, cg_role role, int slot, cg_ty elem, bool is_const) {
  cg_x *x = new_x(k, CG_X_PARAM, CG_T_PTR);
  x->role = (int16_t)role;
  x->slot = (int16_t)slot;
  x->elem = (uint8_t)elem;
  x->is_const = is_const;
  return x;
}

cg_x *cg_in(cg_kernel *k, int slot) {
  return param(k, CG_R_X, slot, cg_ty_of(k->in[slot].dtype), true);
}
cg_x *cg_out(cg_kernel *k, int slot) {
  return param(k, CG_R_Y, slot, cg_ty_of(k->out[slot].dtype), k->backward);
}
cg_x *cg_dy(cg_kernel *k, int slot) {
  return param(k, CG_R_DY, slot, cg_ty_of(k->out[slot].dtype), true);
}
cg_x *cg_dx(cg_kernel *k, int slot) {
  return param(k, CG_R_DX, slot, cg_ty_of(k->in[slot].dtype), false);
}
cg_x *cg_work(cg_kernel *k) { return param(k, CG_R_WORK, 0, CG_T_F32, false); }
cg_x *cg_param_ptr(cg_kernel *k, cg_role role, cg_ty elem, bool is_const) {
  return param(k, role, 0, elem, is_const);
}
cg_x *cg_lr(cg_kernel *k) {
  cg_x *x = new_x(k, CG_X_PARAM, CG_T_F32);
  x->role = CG_R_LR;
  return x;
}

int cg_table_add(cg_kernel *k, ap_dtype t, int64_t n, const void *data) {
  cg_kir *ir = k->ir;
  if (!ap_arena_grow(k->g->arena, (void **)&ir->tables, &ir->cap_tables, ir->n_tables + 1,
                     sizeof *ir->tables)) {
    k->oom = true;
    return 0;
  }
  ir->tables[ir->n_tables] = (cg_ktable){(uint8_t)cg_ty_of(t), n, data};
  return ir->n_tables++;
}

cg_x *cg_table(cg_kernel *k, int id) {
  cg_x *x = new_x(k, CG_X_DATA, CG_T_PTR);
  x->id = id;
  x->elem = k->oom ? CG_T_F32 : k->ir->tables[id].ty;
  x->is_const = true;
  return x;
}

cg_x *cg_cast(cg_kernel *k, cg_ty ty, cg_x *a) {
  if (a->ty == ty)
    return a;
  if (a->op == CG_X_CONST && !cg_ty_float(ty) && !cg_ty_float(a->ty) && ty != CG_T_BOOL) {
    /* An integer constant converted: wraps to the type's width. */
    cg_x *x = new_x(k, CG_X_CONST, ty);
    int bits = cg_ty_bits(ty);
    uint64_t u = (uint64_t)a->i;
    if (bits < 64)
      u &= ((uint64_t)1 << bits) - 1;
    if (cg_ty_signed(ty) && bits < 64 && (u >> (bits - 1) & 1))
      u |= ~(((uint64_t)1 << bits) - 1);
    x->i = (int64_t)u;
    return x;
  }
  if (a->op == CG_X_CONST && cg_ty_float(ty) &&
      (cg_ty_float((cg_ty)a->ty) || (a->i > -((int64_t)1 << 53) && a->i < ((int64_t)1 << 53)))) {
    /* A constant converted to a float type: exact in double, then rounded
     * once to the type, as C converts it. */
    double v = cg_ty_float((cg_ty)a->ty) ? a->f
               : a->ty == CG_T_U64      ? (double)(uint64_t)a->i
                                        : (double)a->i;
    return cg_const(k, ty, v);
  }
  cg_x *x = new_x(k, CG_X_CAST, ty);
  x->a[0] = a;
  return x;
}

/* C's integer promotions: anything narrower than int (and a condition)
 * becomes int. */
static cg_ty promoted(cg_ty t) {
  switch (t) {
  case CG_T_BOOL: case CG_T_I8: case CG_T_U8: case CG_T_I16: case CG_T_U16: return CG_T_I32;
  default: return t;
  }
}

/* The usual arithmetic conversions: the common type of a and b. */
static cg_ty common(cg_ty a, cg_ty b) {
  if (a == CG_T_F64 || b == CG_T_F64)
    return CG_T_F64;
  if (a == CG_T_F32 || b == CG_T_F32)
    return CG_T_F32;
  a = promoted(a);
  b = promoted(b);
  if (a == b)
    return a;
  int ra = cg_ty_bits(a), rb = cg_ty_bits(b);
  bool sa = cg_ty_signed(a), sb = cg_ty_signed(b);
  if (sa == sb)
    return ra >= rb ? a : b;
  cg_ty u = sa ? b : a, s = sa ? a : b;
  if (cg_ty_bits(u) >= cg_ty_bits(s))
    return u;
  return s; /* int64 holds every uint32 */
}

/* A condition: a comparison as it is, anything else compared with zero. */
static cg_x *truth(cg_kernel *k, cg_x *a) {
  if (a->ty == CG_T_BOOL)
    return a;
  cg_x *x = new_x(k, CG_X_NE, CG_T_BOOL);
  x->a[0] = a;
  x->a[1] = cg_const(k, (cg_ty)a->ty, 0);
  return x;
}

/* Folds integer constants, wrapping in the type. */
static cg_x *fold(cg_kernel *k, cg_xop op, cg_ty t, cg_x *a, cg_x *b) {
  if (a->op != CG_X_CONST || b->op != CG_X_CONST || cg_ty_float(t))
    return NULL;
  uint64_t x = (uint64_t)a->i, y = (uint64_t)b->i, r;
  switch (op) {
  case CG_X_ADD: r = x + y; break;
  case CG_X_SUB: r = x - y; break;
  case CG_X_MUL: r = x * y; break;
  default: return NULL;
  }
  cg_x *c = new_x(k, CG_X_CONST, CG_T_U64);
  c->i = (int64_t)r;
  return cg_cast(k, t, c);
}

cg_x *cg_bin(cg_kernel *k, cg_xop op, cg_x *a, cg_x *b) {
  bool logical = op == CG_X_AND || op == CG_X_OR;
  if (logical) {
    cg_x *x = new_x(k, op, CG_T_BOOL);
    x->a[0] = truth(k, a);
    x->a[1] = truth(k, b);
    return x;
  }
  if (a->ty == CG_T_PTR && (op == CG_X_ADD || op == CG_X_SUB))
    ap_die("pointer arithmetic is cg_at's");
  cg_ty t = common((cg_ty)a->ty, (cg_ty)b->ty);
  a = cg_cast(k, t, a);
  b = cg_cast(k, t, b);
  cg_x *f = fold(k, op, t, a, b);
  if (f)
    return f;
  /* x + 0, x - 0, x * 1, x / 1 of integers are x: kernels read better
   * without them, and they are exact. */
  if (!cg_ty_float(t) && b->op == CG_X_CONST &&
      (((op == CG_X_ADD || op == CG_X_SUB) && b->i == 0) ||
       ((op == CG_X_MUL || op == CG_X_DIV) && b->i == 1)))
    return a;
  if (!cg_ty_float(t) && a->op == CG_X_CONST &&
      ((op == CG_X_ADD && a->i == 0) || (op == CG_X_MUL && a->i == 1)))
    return b;
  bool cmp = op >= CG_X_LT && op <= CG_X_NE;
  cg_x *x = new_x(k, op, cmp ? CG_T_BOOL : t);
  x->a[0] = a;
  x->a[1] = b;
  return x;
}

cg_x *cg_add(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_ADD, a, b); }
cg_x *cg_sub(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_SUB, a, b); }
cg_x *cg_mul(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_MUL, a, b); }
cg_x *cg_div(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_DIV, a, b); }
cg_x *cg_lt(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_LT, a, b); }
cg_x *cg_le(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_LE, a, b); }
cg_x *cg_gt(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_GT, a, b); }
cg_x *cg_ge(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_GE, a, b); }
cg_x *cg_eq(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_EQ, a, b); }
cg_x *cg_ne(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_NE, a, b); }
cg_x *cg_and(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_AND, a, b); }
cg_x *cg_or(cg_kernel *k, cg_x *a, cg_x *b) { return cg_bin(k, CG_X_OR, a, b); }

cg_x *cg_not(cg_kernel *k, cg_x *a) {
  cg_x *x = new_x(k, CG_X_NOT, CG_T_BOOL);
  x->a[0] = truth(k, a);
  return x;
}

cg_x *cg_neg(cg_kernel *k, cg_x *a) {
  a = cg_cast(k, promoted((cg_ty)a->ty), a);
  cg_x *x = new_x(k, CG_X_NEG, (cg_ty)a->ty);
  x->a[0] = a;
  return x;
}

cg_x *cg_sel(cg_kernel *k, cg_x *c, cg_x *a, cg_x *b) {
  cg_ty t = a->ty == CG_T_PTR ? CG_T_PTR : common((cg_ty)a->ty, (cg_ty)b->ty);
  cg_x *x = new_x(k, CG_X_SELECT, t);
  x->a[0] = truth(k, c);
  x->a[1] = cg_cast(k, t, a);
  x->a[2] = cg_cast(k, t, b);
  return x;
}

cg_x *cg_minmax(cg_kernel *k, bool max, cg_ty t, cg_x *a, cg_x *b) {
  cg_x *x = new_x(k, max ? CG_X_MAX : CG_X_MIN, t);
  x->a[0] = cg_cast(k, t, a);
  x->a[1] = cg_cast(k, t, b);
  return x;
}

static cg_x *call(cg_kernel *k, cg_fn fn, cg_ty t, cg_x *a, cg_x *b) {
  cg_x *x = new_x(k, CG_X_CALL, t);
  x->fn = (uint8_t)fn;
  x->a[0] = cg_cast(k, t, a);
  if (b)
    x->a[1] = cg_cast(k, t, b);
  return x;
}

const char *cg_fn_name(cg_fn fn) {
  static const char *const names[] = {
#define X(id, name, arity) [CG_FN_##id] = name,
      CG_FNS(X)
#undef X
  };
  return names[fn];
}

cg_x *cg_fn1(cg_kernel *k, cg_fn fn, cg_x *a) {
  return call(k, fn, a->ty == CG_T_F32 ? CG_T_F32 : CG_T_F64, a, NULL);
}
cg_x *cg_fnd(cg_kernel *k, cg_fn fn, cg_x *a) { return call(k, fn, CG_T_F64, a, NULL); }
cg_x *cg_fn2(cg_kernel *k, cg_fn fn, cg_x *a, cg_x *b) {
  return call(k, fn, a->ty == CG_T_F32 && b->ty == CG_T_F32 ? CG_T_F32 : CG_T_F64, a, b);
}

cg_x *cg_ld(cg_kernel *k, cg_x *p, cg_x *i) {
  cg_x *x = new_x(k, CG_X_LOAD, (cg_ty)p->elem);
  x->a[0] = p;
  x->a[1] = cg_cast(k, CG_T_I64, i);
  return x;
}

cg_x *cg_ldi(cg_kernel *k, cg_x *p, int64_t i) { return cg_ld(k, p, cg_i64(k, i)); }

cg_x *cg_at(cg_kernel *k, cg_x *p, cg_x *i) {
  if (i->op == CG_X_CONST && i->i == 0)
    return p;
  cg_x *x = new_x(k, CG_X_INDEX, CG_T_PTR);
  x->elem = p->elem;
  x->is_const = p->is_const;
  x->a[0] = p;
  x->a[1] = cg_cast(k, CG_T_I64, i);
  return x;
}

cg_x *cg_view(cg_kernel *k, cg_x *p, cg_ty elem) {
  cg_x *x = new_x(k, CG_X_VIEW, CG_T_PTR);
  x->elem = (uint8_t)elem;
  x->is_const = p->is_const;
  x->a[0] = p;
  return x;
}

/* ---- statements ---------------------------------------------------------------- */

static int new_var(cg_kernel *k, const char *name, cg_x *like, cg_ty ty, bool mut) {
  cg_kir *ir = k->ir;
  if (!ap_arena_grow(k->g->arena, (void **)&ir->vars, &ir->cap_vars, ir->n_vars + 1,
                     sizeof *ir->vars)) {
    k->oom = true;
    return 0;
  }
  ir->vars[ir->n_vars] = (cg_var){.name = name, .ty = (uint8_t)ty, .mut = mut};
  if (like && like->ty == CG_T_PTR) {
    ir->vars[ir->n_vars].elem = like->elem;
    ir->vars[ir->n_vars].is_const = like->is_const;
  }
  return ir->n_vars++;
}

int cg_let(cg_kernel *k, const char *name, cg_x *init) {
  int v = new_var(k, name, init, (cg_ty)init->ty, false);
  cg_s *s = new_s(k, CG_ST_DECL);
  s->var = v;
  s->a[0] = init;
  return v;
}

int cg_mut(cg_kernel *k, const char *name, cg_ty ty, cg_x *init) {
  int v = new_var(k, name, init, ty, true);
  cg_s *s = new_s(k, CG_ST_DECL);
  s->var = v;
  s->a[0] = ty == CG_T_PTR ? init : cg_cast(k, ty, init);
  return v;
}

void cg_set(cg_kernel *k, int var, cg_x *x) {
  cg_s *s = new_s(k, CG_ST_SET);
  s->var = var;
  s->a[0] = k->oom ? x : cg_cast(k, (cg_ty)k->ir->vars[var].ty, x);
}

void cg_set_op(cg_kernel *k, int var, cg_xop op, cg_x *x) {
  cg_set(k, var, cg_bin(k, op, cg_v(k, var), x));
}

void cg_st(cg_kernel *k, cg_x *p, cg_x *i, cg_x *x) {
  cg_s *s = new_s(k, CG_ST_STORE);
  s->a[0] = p;
  s->a[1] = cg_cast(k, CG_T_I64, i);
  s->a[2] = cg_cast(k, (cg_ty)p->elem, x);
}

void cg_st_op(cg_kernel *k, cg_x *p, cg_x *i, cg_xop op, cg_x *x) {
  cg_st(k, p, i, cg_bin(k, op, cg_ld(k, p, i), x));
}

/* Opens a block whose statements go into *slot. */
static void open_block(cg_kernel *k, cg_s *s, cg_s **slot) {
  if (k->depth >= CG_MAX_DEPTH)
    ap_die("loops nested deeper than %d", CG_MAX_DEPTH);
  k->open[k->depth] = s;
  k->saved_tail[k->depth++] = k->tail;
  k->tail = slot;
}

int cg_for(cg_kernel *k, const char *name, cg_x *lo, cg_x *hi) {
  int v = new_var(k, name, NULL, CG_T_I64, true);
  cg_s *s = new_s(k, CG_ST_FOR);
  s->var = v;
  s->a[0] = cg_cast(k, CG_T_I64, lo);
  s->a[1] = cg_cast(k, CG_T_I64, hi);
  open_block(k, s, &s->body);
  return v;
}

int cg_for_n(cg_kernel *k, const char *name, int64_t n) {
  return cg_for(k, name, cg_i64(k, 0), cg_i64(k, n));
}

void cg_if(cg_kernel *k, cg_x *cond) {
  cg_s *s = new_s(k, CG_ST_IF);
  s->a[0] = truth(k, cond);
  open_block(k, s, &s->body);
}

void cg_else(cg_kernel *k) {
  if (k->depth < 1 || (k->open[k->depth - 1]->op != CG_ST_IF && !k->oom))
    ap_die("cg_else outside an if");
  k->tail = &k->open[k->depth - 1]->els;
}

void cg_end(cg_kernel *k) {
  if (k->depth < 1)
    ap_die("cg_end without an open loop or if");
  k->tail = k->saved_tail[--k->depth];
}

void cg_memcpy(cg_kernel *k, cg_x *dst, cg_x *src, cg_x *bytes) {
  cg_s *s = new_s(k, CG_ST_MEMCPY);
  s->a[0] = dst;
  s->a[1] = src;
  s->a[2] = cg_cast(k, CG_T_I64, bytes);
}

void cg_memset(cg_kernel *k, cg_x *dst, int byte, cg_x *bytes) {
  cg_s *s = new_s(k, CG_ST_MEMSET);
  s->a[0] = dst;
  s->a[1] = cg_cast(k, CG_T_I64, bytes);
  s->iarg[0] = byte;
}

static cg_s *sgemm(cg_kernel *k, int ta, int tb, int64_t m, int64_t n, int64_t kk,
                   double alpha, cg_x *a, int64_t lda, cg_x *b, int64_t ldb, double beta,
                   cg_x *c) {
  cg_s *s = new_s(k, CG_ST_SGEMM);
  int64_t iv[8] = {ta, tb, m, n, kk, lda, ldb, n};
  memcpy(s->iarg, iv, sizeof iv);
  s->farg[0] = (double)(float)alpha;
  s->farg[1] = (double)(float)beta;
  s->a[0] = a;
  s->a[1] = b;
  s->a[2] = c;
  s->a[3] = cg_work(k);
  k->ir->uses_lib |= !k->oom;
  return s;
}

void cg_sgemm(cg_kernel *k, int ta, int tb, int64_t m, int64_t n, int64_t kk, double alpha,
              cg_x *a, cg_x *b, double beta, cg_x *c) {
  sgemm(k, ta, tb, m, n, kk, alpha, a, ta ? m : kk, b, tb ? kk : n, beta, c);
}

void cg_sgemm_ld(cg_kernel *k, int ta, int tb, int64_t m, int64_t n, int64_t kk, double alpha,
                 cg_x *a, int64_t lda, cg_x *b, int64_t ldb, double beta, cg_x *c) {
  sgemm(k, ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c);
}

void cg_conv_call(cg_kernel *k, cg_conv_fn fn, const int64_t *conv, int n, cg_x *const *args) {
  cg_s *s = new_s(k, CG_ST_CONV);
  s->lib = (uint8_t)fn;
  memcpy(s->iarg, conv, sizeof s->iarg);
  s->n_args = n;
  for (int i = 0; i < n; i++)
    s->a[i] = args[i];
  k->ir->uses_lib |= !k->oom;
}

bool cg_pack_operand(cg_kernel *k, int slot, cg_pack_kind kind, const int64_t *iarg, int n_iarg) {
  const cg_operand *o = &k->in[slot];
  if (!k->prepack || k->packed || !o->v || !o->v->data || o->dtype != AP_DT_FLOAT)
    return false;
  k->packed = true;
  k->pack_slot = slot;
  k->pack_kind = (uint8_t)kind;
  memset(k->pack_iarg, 0, sizeof k->pack_iarg);
  memcpy(k->pack_iarg, iarg, (size_t)n_iarg * sizeof *iarg);
  return true;
}

void cg_sgemm_pb(cg_kernel *k, int ta, int64_t m, int64_t n, int64_t kk, double alpha, cg_x *a,
                 int64_t lda, cg_x *pb, double beta, cg_x *c) {
  cg_s *s = sgemm(k, ta, 0, m, n, kk, alpha, a, lda, pb, 0, beta, c);
  s->iarg[8] = 1;
}

void cg_pack_call(cg_kernel *k, cg_pack_kind kind, const int64_t *iarg, cg_x *src, cg_x *dst) {
  cg_s *s = new_s(k, CG_ST_PACK);
  s->lib = (uint8_t)kind;
  memcpy(s->iarg, iarg, sizeof s->iarg);
  s->n_args = 2;
  s->a[0] = src;
  s->a[1] = dst;
  k->ir->uses_lib |= !k->oom;
}

void cg_work_const(cg_kernel *k, int64_t floats) { k->ir->work_floats += floats; }

static void work_term(cg_kernel *k, bool conv, const int64_t *v, int n) {
  cg_kir *ir = k->ir;
  if (!ap_arena_grow(k->g->arena, (void **)&ir->work_terms, &ir->cap_work_terms,
                     ir->n_work_terms + 1, sizeof *ir->work_terms)) {
    k->oom = true;
    return;
  }
  cg_work_term *t = &ir->work_terms[ir->n_work_terms++];
  memset(t, 0, sizeof *t);
  t->conv = conv;
  memcpy(t->v, v, (size_t)n * sizeof *v);
}

void cg_work_sgemm(cg_kernel *k, int64_t m, int64_t n, int64_t kk) {
  int64_t v[3] = {m, n, kk};
  work_term(k, false, v, 3);
}

void cg_work_conv(cg_kernel *k, const int64_t *conv) { work_term(k, true, conv, CG_CONV_FIELDS); }

/* ---- helpers of the emitters ------------------------------------------------------- */

cg_x *cg_idx(cg_kernel *k, int rank, const int64_t *strides, const int *vars) {
  cg_x *sum = NULL;
  for (int i = 0; i < rank; i++) {
    if (!strides[i])
      continue;
    cg_x *t = strides[i] == 1 ? cg_v(k, vars[i]) : cg_mul(k, cg_v(k, vars[i]), cg_i64(k, strides[i]));
    sum = sum ? cg_add(k, sum, t) : t;
  }
  return sum ? sum : cg_i64(k, 0);
}

void cg_loops(cg_kernel *k, int rank, const int64_t *dims, const char *name, int *vars) {
  for (int i = 0; i < rank; i++) {
    const char *ni = ap_arena_printf(k->g->arena, "%s%d", name, i);
    if (!ni)
      k->oom = true;
    vars[i] = cg_for_n(k, ni ? ni : name, dims[i]);
  }
}

void cg_loops_end(cg_kernel *k, int rank) {
  for (int i = 0; i < rank; i++)
    cg_end(k);
}

void cg_kernel_begin(cg_kernel *k, cg_kir *ir) {
  memset(ir, 0, sizeof *ir);
  k->ir = ir;
  k->tail = &ir->body;
  k->depth = 0;
  k->oom = false;
}

/* ---- comparing ------------------------------------------------------------------- */

bool cg_kir_needs_work(const cg_kir *k) { return k->work_floats > 0 || k->n_work_terms > 0; }

static bool x_equal(const cg_x *a, const cg_x *b) {
  if (!a || !b)
    return a == b;
  if (a->op != b->op || a->ty != b->ty || a->elem != b->elem || a->fn != b->fn ||
      a->is_const != b->is_const || a->role != b->role || a->slot != b->slot || a->id != b->id)
    return false;
  if (a->op == CG_X_CONST &&
      (cg_ty_float((cg_ty)a->ty) ? memcmp(&a->f, &b->f, sizeof a->f) != 0 : a->i != b->i))
    return false;
  for (int i = 0; i < 3; i++)
    if (!x_equal(a->a[i], b->a[i]))
      return false;
  return true;
}

static bool s_equal(const cg_s *a, const cg_s *b) {
  for (; a && b; a = a->next, b = b->next) {
    if (a->op != b->op || a->lib != b->lib || a->var != b->var || a->n_args != b->n_args ||
        memcmp(a->iarg, b->iarg, sizeof a->iarg) != 0 ||
        memcmp(a->farg, b->farg, sizeof a->farg) != 0)
      return false;
    for (int i = 0; i < 6; i++)
      if (!x_equal(a->a[i], b->a[i]))
        return false;
    if (!s_equal(a->body, b->body) || !s_equal(a->els, b->els))
      return false;
  }
  return !a && !b;
}

bool cg_kir_equal(const cg_kir *a, const cg_kir *b) {
  if (a->n_params != b->n_params || a->n_vars != b->n_vars || a->n_tables != b->n_tables ||
      a->work_floats != b->work_floats || a->n_work_terms != b->n_work_terms ||
      a->uses_lib != b->uses_lib)
    return false;
  if (memcmp(a->params, b->params, (size_t)a->n_params * sizeof *a->params) != 0)
    return false;
  for (int i = 0; i < a->n_vars; i++) {
    const cg_var *x = &a->vars[i], *y = &b->vars[i];
    if (x->ty != y->ty || x->elem != y->elem || x->is_const != y->is_const || x->mut != y->mut ||
        strcmp(x->name, y->name) != 0)
      return false;
  }
  for (int i = 0; i < a->n_tables; i++) {
    const cg_ktable *x = &a->tables[i], *y = &b->tables[i];
    if (x->ty != y->ty || x->n != y->n ||
        memcmp(x->data, y->data, (size_t)x->n * (size_t)cg_ty_bits((cg_ty)x->ty) / 8) != 0)
      return false;
  }
  for (int i = 0; i < a->n_work_terms; i++)
    if (a->work_terms[i].conv != b->work_terms[i].conv ||
        memcmp(a->work_terms[i].v, b->work_terms[i].v, sizeof a->work_terms[i].v) != 0)
      return false;
  return s_equal(a->body, b->body);
}
