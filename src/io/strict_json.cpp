#include "io/strict_json.h"

#include <string>
#include <utility>
#include <vector>

#include "io/quote.h"
#include "nmsparse/core/error.h"

namespace nms::detail {
namespace {

using json = nlohmann::json;

// SAX handler that builds a DOM like nlohmann's own, but refuses duplicates and enforces limits.
class StrictBuilder {
 public:
  StrictBuilder(json& root, JsonLimits limits) : root_(root), limits_(limits) {}

  bool null() { return put(json(nullptr)) != nullptr; }
  bool boolean(bool value) { return put(json(value)) != nullptr; }
  bool number_integer(json::number_integer_t value) { return put(json(value)) != nullptr; }
  bool number_unsigned(json::number_unsigned_t value) { return put(json(value)) != nullptr; }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) {
    return put(json(value)) != nullptr;
  }
  bool string(json::string_t& value) { return put(json(std::move(value))) != nullptr; }
  bool binary(json::binary_t& /*value*/) {
    error_ = "binary value";  // cannot come from JSON text; refuse anyway
    return false;
  }

  bool start_object(std::size_t /*size*/) { return open(json::object()); }
  bool end_object() { return close(); }
  bool start_array(std::size_t /*size*/) { return open(json::array()); }
  bool end_array() { return close(); }

  bool key(json::string_t& name) {
    json& object = *stack_.back();
    if (object.contains(name)) {
      error_ = concat("duplicate key ", quote_untrusted(name));
      return false;
    }
    pending_ = &object[name];
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    // ex.what() looks like "[json.exception.parse_error.101] parse error at line 1, column 9:
    // syntax error while parsing value - invalid literal; last read: '...'"; it may quote input
    // bytes, so it is escaped.
    std::string what = ex.what();
    if (const size_t bracket = what.find("] ");
        what.starts_with("[json.") && bracket != what.npos) {
      what.erase(0, bracket + 2);
    }
    error_ = concat("invalid JSON at byte ", position, ": ", quote_untrusted(what, 240));
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  // Places `value` where the grammar says (root, array element or the pending key's value).
  json* put(json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      if (top.size() >= limits_.max_array_size) {
        error_ = concat("array longer than ", limits_.max_array_size, " elements");
        return nullptr;
      }
      top.push_back(std::move(value));
      return &top.back();
    }
    *pending_ = std::move(value);
    return pending_;
  }

  bool open(json&& container) {
    if (stack_.size() >= limits_.max_depth) {
      error_ = concat("nesting deeper than ", limits_.max_depth, " levels");
      return false;
    }
    json* placed = put(std::move(container));
    if (placed == nullptr) return false;
    stack_.push_back(placed);
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  json& root_;
  JsonLimits limits_;
  std::vector<json*> stack_;  // open containers; element pointers stay valid while open
  json* pending_ = nullptr;   // value slot of the last key
  std::string error_;
};

}  // namespace

json parse_strict_json(std::string_view text, std::string_view context, JsonLimits limits) {
  // nlohmann's lexer takes a NUL byte for the end of input and would silently ignore everything
  // after it. A raw NUL is never valid JSON (inside strings it must be escaped), so refuse it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw Error(concat(context, ": invalid JSON: NUL byte at byte ", nul));
  }
  json root;
  StrictBuilder builder(root, limits);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& ex) {
    throw Error(concat(context, ": invalid JSON: ", quote_untrusted(ex.what(), 240)));
  }
  if (!ok) {
    throw Error(concat(context, ": ", builder.error().empty() ? "invalid JSON" : builder.error()));
  }
  return root;
}

}  // namespace nms::detail
