/* The operator table, expanded from ir/ops.def. */
#include <string.h>

#include "ir/ir.h"

const ap_op_info ap_op_table[AP_OP_COUNT] = {
#define OP(id, nm, min_in, max_in, min_out, max_out, kind, axes, const_in) \
  [AP_OP_##id] = {nm, min_in, max_in, min_out, max_out, AP_OPK_##kind, AP_AXES_##axes, const_in},
#include "ir/ops.def"
#undef OP
};

ap_op ap_op_lookup(const char *domain, const char *type) {
  if (domain && *domain && strcmp(domain, "ai.onnx") != 0)
    return AP_OP_UNKNOWN;
  for (int i = 0; i < AP_OP_COUNT; i++)
    if (strcmp(ap_op_table[i].name, type) == 0)
      return (ap_op)i;
  return AP_OP_UNKNOWN;
}
