#include "tessera/inference/jinja/operators.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "tessera/inference/jinja/builtins.h"

namespace tessera::inference::jinja {

void fail_undefined(const Value& v) { fail(v.s.empty() ? "a value is undefined" : v.s); }

namespace {

using K = Value::Kind;

bool is_intlike(const Value& v) { return v.kind == K::kInt || v.kind == K::kBool; }
int64_t as_int(const Value& v) { return v.kind == K::kInt ? v.i : (v.b ? 1 : 0); }
double as_double(const Value& v) {
  return v.kind == K::kFloat ? v.f : static_cast<double>(as_int(v));
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) +
       "'");
}

int64_t checked(bool overflow, int64_t r, const std::string& op) {
  if (overflow) fail("integer overflow in '" + op + "' (the interpreter's integers are 64-bit)");
  return r;
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return seq.kind == K::kTuple ? Value::make_tuple(std::move(out))
                               : Value::make_list(std::move(out));
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

double float_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    return Value::string(to_str(a) + to_str(b));
  }
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = is_intlike(a) && is_intlike(b);
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_add_overflow(as_int(a), as_int(b), &r);
      return Value::integer(checked(overflow, r, op));
    }
    if (numbers) return Value::real(as_double(a) + as_double(b));
    if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
    if (a.is_sequence() && a.kind == b.kind) {
      List out(*a.list);
      out.insert(out.end(), b.list->begin(), b.list->end());
      return a.kind == K::kTuple ? Value::make_tuple(std::move(out))
                                 : Value::make_list(std::move(out));
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_sub_overflow(as_int(a), as_int(b), &r);
      return Value::integer(checked(overflow, r, op));
    }
    if (numbers) return Value::real(as_double(a) - as_double(b));
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      const bool overflow = __builtin_mul_overflow(as_int(a), as_int(b), &r);
      return Value::integer(checked(overflow, r, op));
    }
    if (numbers) return Value::real(as_double(a) * as_double(b));
    if ((a.is_string() || a.is_sequence()) && is_intlike(b)) return repeat(a, as_int(b));
    if ((b.is_string() || b.is_sequence()) && is_intlike(a)) return repeat(b, as_int(a));
    unsupported(op, a, b);
  }
  if (op == "%" && a.is_string())
    fail("string formatting with '%' is not supported by the chat template interpreter");
  if (!numbers) unsupported(op, a, b);
  if (op == "/") {
    if (as_double(b) == 0) fail("division by zero");
    return Value::real(as_double(a) / as_double(b));
  }
  if (op == "//" || op == "%") {
    if (as_double(b) == 0) fail("integer division or modulo by zero");
    if (ints) {
      if (as_int(a) == INT64_MIN && as_int(b) == -1) checked(true, 0, op);
      const int64_t q = floor_div(as_int(a), as_int(b));
      return Value::integer(op == "//" ? q : as_int(a) - q * as_int(b));
    }
    const double m = float_mod(as_double(a), as_double(b));
    return Value::real(op == "%" ? m : std::round((as_double(a) - m) / as_double(b)));
  }
  if (op == "**") {
    if (ints && as_int(b) >= 0) {
      // Squaring: a bit of the exponent still to come always uses the squared base, so an
      // overflow in squaring is an overflow of the result.
      int64_t r = 1, base = as_int(a);
      for (int64_t e = as_int(b); e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) checked(true, 0, op);
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) checked(true, 0, op);
      }
      return Value::integer(r);
    }
    return Value::real(std::pow(as_double(a), as_double(b)));
  }
  fail("unknown operator '" + op + "'");
}

Value unary_op(const std::string& op, const Value& v) {
  if (!v.is_number()) {
    if (v.is_undefined()) fail_undefined(v);
    fail("bad operand type for unary " + op + ": '" + type_name(v) + "'");
  }
  if (v.kind == K::kFloat) return Value::real(op == "-" ? -v.f : v.f);
  if (op == "-" && as_int(v) == INT64_MIN) checked(true, 0, op);
  return Value::integer(op == "-" ? -as_int(v) : as_int(v));
}

namespace {

// Python's ordering for <, <=, >, >=: numbers, strings (code point order is UTF-8 byte order),
// and sequences of the same kind item by item.
int order(const std::string& op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_intlike(a) && is_intlike(b)) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
    if (std::isnan(as_double(a)) || std::isnan(as_double(b))) return 2;  // every comparison false
    return as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b);
  }
  if (a.is_string() && b.is_string()) return a.s.compare(b.s) < 0 ? -1 : a.s.compare(b.s) > 0;
  if (a.is_sequence() && a.kind == b.kind) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k)
      if (!equals((*a.list)[k], (*b.list)[k])) return order(op, (*a.list)[k], (*b.list)[k]);
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("'" + op + "' not supported between instances of '" + type_name(a) + "' and '" +
       type_name(b) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case K::kString:
      if (!item.is_string())
        fail("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case K::kList:
    case K::kTuple:
      for (const Value& x : *container.list)
        if (equals(x, item)) return true;
      return false;
    case K::kDict:
      return item.is_string() && find_key(*container.dict, item.s) != nullptr;
    case K::kUndefined:
      return false;  // Jinja's Undefined iterates as empty
    default:
      fail("argument of type '" + type_name(container) + "' is not iterable");
  }
}

}  // namespace

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  const int c = order(op, a, b);
  if (c == 2) return false;
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;  // ">="
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if ((obj.is_sequence() || obj.is_string()) && is_intlike(key)) {
    const std::u32string chars = obj.is_string() ? decode_utf8(obj.s) : std::u32string();
    const int64_t n = obj.is_string() ? static_cast<int64_t>(chars.size())
                                      : static_cast<int64_t>(obj.list->size());
    int64_t k = as_int(key);
    if (k < 0) k += n;
    if (k < 0 || k >= n)
      return Value::undefined(type_name(obj) + " index " + std::to_string(as_int(key)) +
                              " is out of range");
    if (obj.is_string()) return Value::string(encode_utf8(chars.substr(k, 1)));
    return (*obj.list)[k];
  }
  if (obj.kind == K::kDict && key.is_string()) {
    if (const Value* v = find_key(*obj.dict, key.s)) return *v;
  }
  if (key.is_string()) return get_attribute(obj, key.s);
  return Value::undefined(std::string("'").append(type_name(obj)) + " object' has no element " +
                          repr(key));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_string() && !obj.is_sequence())
    fail(std::string("'").append(type_name(obj)) + "' object is not sliceable");
  const auto index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.kind == K::kNone) return std::nullopt;
    if (!is_intlike(v)) fail(std::string("slice ") + what + " must be an integer or None");
    return as_int(v);
  };
  const std::u32string chars = obj.is_string() ? decode_utf8(obj.s) : std::u32string();
  const int64_t n =
      obj.is_string() ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(obj.list->size());
  const int64_t st = index(step, "step").value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0)
      x = std::max<int64_t>(x + n, st < 0 ? -1 : 0);
    else if (x >= n)
      x = st < 0 ? n - 1 : n;
    return x;
  };
  const int64_t lo = adjust(index(start, "start"), st < 0 ? n - 1 : 0);
  const int64_t hi = adjust(index(stop, "stop"), st < 0 ? -1 : n);
  std::u32string s;
  List l;
  for (int64_t k = lo; st > 0 ? k < hi : k > hi; k += st) {
    if (obj.is_string())
      s.push_back(chars[k]);
    else
      l.push_back((*obj.list)[k]);
  }
  if (obj.is_string()) return Value::string(encode_utf8(s));
  return obj.kind == K::kTuple ? Value::make_tuple(std::move(l)) : Value::make_list(std::move(l));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return {};
    case K::kList:
    case K::kTuple:
      return *v.list;
    case K::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : *v.dict) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case K::kString: {
      std::vector<Value> chars;
      for (const char32_t c : decode_utf8(v.s))
        chars.push_back(Value::string(encode_utf8({&c, 1})));
      return chars;
    }
    default:
      fail(std::string("'").append(type_name(v)) + "' object is not iterable");
  }
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return 0;
    case K::kString:
      return static_cast<int64_t>(decode_utf8(v.s).size());
    case K::kList:
    case K::kTuple:
      return static_cast<int64_t>(v.list->size());
    case K::kDict:
      return static_cast<int64_t>(v.dict->size());
    default:
      fail("object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace tessera::inference::jinja
