#include "core/model/launch_script.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipescope {
namespace {

// A word as written: pieces of text, each quoted or not; expansions already done except word splitting.
struct Piece {
  std::string text;
  bool quoted = false;
  bool array = false;  // the whole piece is one array's elements (text holds them joined by '\n')
};
using Word = std::vector<Piece>;

class Expander {
 public:
  Expander(std::string source, std::map<std::string, std::string>& vars,
           std::map<std::string, std::vector<std::string>>& arrays, std::vector<std::string>& unresolved)
      : source_(std::move(source)), vars_(vars), arrays_(arrays), unresolved_(unresolved) {}

  // The words of one logical line (continuations joined), comments dropped. `line`: for messages.
  std::vector<Word> words(const std::string& s, int line) const {
    std::vector<Word> out;
    Word cur;
    bool started = false;
    auto finish = [&] {
      if (started) out.push_back(std::move(cur));
      cur.clear(), started = false;
    };
    for (std::size_t i = 0; i < s.size();) {
      const char c = s[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        finish();
        i++;
      } else if (c == '#' && !started) {
        break;
      } else if (c == '\'') {
        const std::size_t end = s.find('\'', i + 1);
        if (end == std::string::npos) fail(line, "unterminated '");
        cur.push_back({s.substr(i + 1, end - i - 1), true, false});
        started = true, i = end + 1;
      } else if (c == '"') {
        i = double_quoted(s, i + 1, line, cur);
        started = true;
      } else if (c == '\\' && i + 1 < s.size()) {
        cur.push_back({std::string(1, s[i + 1]), true, false});
        started = true, i += 2;
      } else if (c == '$') {
        i = expansion(s, i, line, cur, false);
        started = true;
      } else if (c == '(' || c == ')' || c == ';') {  // array brackets and command separators stand alone
        finish();
        out.push_back({{std::string(1, c), false, false}});
        i++;
      } else {
        cur.push_back({std::string(1, c), false, false});
        started = true, i++;
      }
    }
    finish();
    return out;
  }

  // A word's expansion: unquoted text split on whitespace, arrays to their elements.
  static std::vector<std::string> fields(const Word& w) {
    std::vector<std::string> out;
    std::string cur;
    bool any = false;
    for (const Piece& p : w) {
      if (p.array) {
        std::size_t at = 0;
        std::vector<std::string> elems;
        while (at <= p.text.size() && !p.text.empty()) {
          const std::size_t nl = p.text.find('\n', at);
          elems.push_back(p.text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
          if (nl == std::string::npos) break;
          at = nl + 1;
        }
        // Unquoted, each element is split into words too ("--fp8-format hybrid" is two arguments).
        for (std::size_t k = 0; k < elems.size(); k++) {
          if (!p.quoted) {
            split_into(elems[k], cur, any, out);
          } else {
            cur += elems[k], any = true;
          }
          if (k + 1 < elems.size() && any) out.push_back(cur), cur.clear(), any = false;
        }
        continue;
      }
      if (p.quoted) {
        cur += p.text, any = true;
        continue;
      }
      split_into(p.text, cur, any, out);
    }
    if (any) out.push_back(cur);
    return out;
  }

  // Unquoted text: whitespace ends the current word.
  static void split_into(const std::string& text, std::string& cur, bool& any, std::vector<std::string>& out) {
    for (char c : text) {
      if (std::isspace(static_cast<unsigned char>(c))) {
        if (any) out.push_back(cur), cur.clear(), any = false;
      } else {
        cur += c, any = true;
      }
    }
  }

  // Inside a branch the script does not take, nothing it expands is listed as unresolved.
  void listing(bool on) const { listing_ = on; }

  static std::string joined(const Word& w) {
    std::string s;
    for (const Piece& p : w) s += p.array ? replace_newlines(p.text) : p.text;
    return s;
  }

  [[noreturn]] void fail(int line, const std::string& why) const {
    throw std::invalid_argument(source_ + ":" + std::to_string(line) + ": " + why);
  }

 private:
  static std::string replace_newlines(std::string s) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
  }

  std::size_t double_quoted(const std::string& s, std::size_t i, int line, Word& cur) const {
    std::string text;
    while (i < s.size() && s[i] != '"') {
      if (s[i] == '\\' && i + 1 < s.size() && std::string("\"\\$`").find(s[i + 1]) != std::string::npos) {
        text += s[i + 1], i += 2;
      } else if (s[i] == '$') {
        if (!text.empty()) cur.push_back({text, true, false}), text.clear();
        i = expansion(s, i, line, cur, true);
      } else {
        text += s[i++];
      }
    }
    if (i >= s.size()) fail(line, "unterminated \"");
    cur.push_back({text, true, false});
    return i + 1;
  }

  // $NAME, ${NAME}, ${NAME:-default}, ${NAME[@]}, $1, $(...), $((...)) starting at s[i] == '$'.
  std::size_t expansion(const std::string& s, std::size_t i, int line, Word& cur, bool quoted) const {
    // What the script does not set stays as written ("$4"): an argument's value then keeps its place (bash would
    // expand it to nothing, and "--data-path $4" would take the next flag as its value).
    auto value = [&](const std::string& name, const std::string* def, const std::string& written) {
      const auto it = vars_.find(name);
      if (it != vars_.end()) return it->second;
      if (def) return *def;
      note(written);
      return written;
    };
    if (i + 1 >= s.size()) {
      cur.push_back({"$", quoted, false});
      return i + 1;
    }
    const char n = s[i + 1];
    if (n == '(') {  // command or arithmetic substitution: not run
      int depth = 0;
      std::size_t j = i + 1;
      for (; j < s.size(); j++) {
        depth += s[j] == '(' ? 1 : s[j] == ')' ? -1 : 0;
        if (depth == 0) break;
      }
      if (j >= s.size()) fail(line, "unterminated $(");
      note(s.substr(i, j - i + 1));
      cur.push_back({s.substr(i, j - i + 1), true, false});
      return j + 1;
    }
    if (n == '{') {
      const std::size_t end = s.find('}', i + 2);
      if (end == std::string::npos) fail(line, "unterminated ${");
      const std::string inner = s.substr(i + 2, end - i - 2);
      if (const std::size_t br = inner.find('['); br != std::string::npos) {  // ${NAME[@]} / ${NAME[*]}
        const std::string name = inner.substr(0, br);
        const auto it = arrays_.find(name);
        if (it == arrays_.end()) {
          note("${" + inner + "}");
          cur.push_back({"${" + inner + "}", quoted, false});
        } else {
          std::string elems;
          for (std::size_t k = 0; k < it->second.size(); k++) elems += (k ? "\n" : "") + it->second[k];
          cur.push_back({elems, quoted, true});
        }
        return end + 1;
      }
      const std::size_t dflt = inner.find(":-");
      if (dflt != std::string::npos) {
        // The default is a word of its own: quotes removed, expansions done (${3:-"MOCK"} is MOCK).
        std::string def;
        for (const Word& w : words(inner.substr(dflt + 2), line)) def += (def.empty() ? "" : " ") + joined(w);
        cur.push_back({value(inner.substr(0, dflt), &def, ""), quoted, false});
      } else {
        cur.push_back({value(inner, nullptr, "${" + inner + "}"), quoted, false});
      }
      return end + 1;
    }
    std::size_t j = i + 1;
    if (std::isdigit(static_cast<unsigned char>(n))) {
      j++;
    } else {
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) j++;
    }
    if (j == i + 1) {
      cur.push_back({"$", quoted, false});
      return i + 1;
    }
    cur.push_back({value(s.substr(i + 1, j - i - 1), nullptr, s.substr(i, j - i)), quoted, false});
    return j;
  }

  void note(const std::string& what) const {
    if (listing_ && std::find(unresolved_.begin(), unresolved_.end(), what) == unresolved_.end())
      unresolved_.push_back(what);
  }

 public:
  void note_unresolved(const std::string& what) const { note(what); }

 private:
  mutable bool listing_ = true;

  std::string source_;
  std::map<std::string, std::string>& vars_;
  std::map<std::string, std::vector<std::string>>& arrays_;
  std::vector<std::string>& unresolved_;
};

// Logical lines: backslash-newline joined (outside single quotes, as bash does), each with its first line number.
std::vector<std::pair<int, std::string>> logical_lines(const std::string& text) {
  std::vector<std::pair<int, std::string>> out;
  std::string cur;
  int line = 1, first = 1;
  bool in_single = false;
  for (std::size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (c == '\'') in_single = !in_single;
    if (c == '\\' && !in_single && i + 1 < text.size() && text[i + 1] == '\n') {
      i++, line++;
      continue;
    }
    if (c == '\n') {
      out.emplace_back(first, cur);
      cur.clear(), in_single = false, first = ++line;
      continue;
    }
    cur += c;
  }
  if (!cur.empty()) out.emplace_back(first, cur);
  return out;
}

bool is_name(const std::string& s) {
  return !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
         std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool is_pretrain(const std::string& w) {
  const std::string base = w.substr(w.find_last_of('/') == std::string::npos ? 0 : w.find_last_of('/') + 1);
  return base.rfind("pretrain_", 0) == 0 && base.size() > 3 && base.substr(base.size() - 3) == ".py";
}

}  // namespace

namespace {

// The branches of `if` / `elif` / `else` / `fi` the script takes: a frame per open `if`.
class Branches {
 public:
  bool active() const {
    return std::all_of(open_.begin(), open_.end(), [](const Frame& f) { return f.taking; });
  }
  // `if COND` (cond evaluated only where the enclosing branch runs), `elif COND`, `else`, `fi`.
  void open(bool cond) { open_.push_back(Frame{cond, cond}); }
  bool any_open() const { return !open_.empty(); }
  // Whether an `elif` condition matters (no earlier branch of its `if` was taken, the enclosing branch runs).
  bool elif_pending() const {
    const bool outer = std::all_of(open_.begin(), open_.end() - 1, [](const Frame& f) { return f.taking; });
    return outer && !open_.back().taken;
  }
  void elif (bool cond) {
    Frame& f = open_.back();
    f.taking = !f.taken && cond;
    f.taken = f.taken || f.taking;
  }
  void otherwise() {
    Frame& f = open_.back();
    f.taking = !f.taken;
    f.taken = true;
  }
  void close() { open_.pop_back(); }

 private:
  struct Frame {
    bool taking, taken;
  };
  std::vector<Frame> open_;
};

// A test bash evaluates without running anything: [[ A == B ]], [[ A != B ]], [[ -z A ]], [[ -n A ]], [[ A ]] (and
// the same in [ ]), joined by || and && left to right, each perhaps after !. nullopt: anything else (a file test, a
// command, a pattern).
std::optional<bool> evaluate(const std::vector<std::string>& t) {
  std::optional<bool> result;
  std::string join;
  for (std::size_t i = 0; i < t.size();) {
    bool negate = false;
    if (t[i] == "!") negate = true, i++;
    if (i >= t.size() || (t[i] != "[[" && t[i] != "[")) return std::nullopt;
    const std::string close = t[i] == "[[" ? "]]" : "]";
    std::size_t j = i + 1;
    while (j < t.size() && t[j] != close) j++;
    if (j >= t.size()) return std::nullopt;
    const std::vector<std::string> x(t.begin() + static_cast<long>(i) + 1, t.begin() + static_cast<long>(j));
    auto literal = [](const std::string& w) { return w.find_first_of("*?[") == std::string::npos; };
    std::optional<bool> v;
    if (x.size() == 3 && (x[1] == "==" || x[1] == "=" || x[1] == "!=") && literal(x[2]))
      v = (x[0] == x[2]) == (x[1] != "!=");
    else if (x.size() == 2 && (x[0] == "-z" || x[0] == "-n"))
      v = x[1].empty() == (x[0] == "-z");
    else if (x.size() == 1)
      v = !x[0].empty();
    if (!v) return std::nullopt;
    const bool b = negate ? !*v : *v;
    result = !result ? b : join == "&&" ? *result && b : *result || b;
    i = j + 1;
    if (i < t.size()) {
      if (t[i] != "&&" && t[i] != "||") return std::nullopt;
      join = t[i++];
    }
  }
  return result;
}

// The words of a test, expanded.
std::vector<std::string> condition_words(const std::vector<Word>& words, std::size_t from) {
  std::vector<std::string> out;
  for (std::size_t k = from; k < words.size(); k++)
    for (std::string& f : Expander::fields(words[k])) out.push_back(std::move(f));
  return out;
}

}  // namespace

LaunchScript read_launch_script(const std::string& text, const std::string& source) {
  std::map<std::string, std::string> vars;
  std::map<std::string, std::vector<std::string>> arrays;
  LaunchScript out;
  const Expander ex(source, vars, arrays, out.unresolved);
  Branches branches;
  const auto lines = logical_lines(text);
  for (std::size_t li = 0; li < lines.size(); li++) {
    const auto& [line, s] = lines[li];
    ex.listing(branches.active());
    std::vector<Word> all = ex.words(s, line);
    // Commands of the line, separated by ';'.
    std::vector<std::vector<Word>> commands(1);
    for (Word& w : all) {
      if (Expander::joined(w) == ";" && !w.empty() && !w[0].quoted)
        commands.emplace_back();
      else
        commands.back().push_back(std::move(w));
    }
    for (std::vector<Word>& words : commands) {
      if (words.empty()) continue;
      const std::string first = Expander::joined(words[0]);
      // if / elif / else / fi: the branch taken where the test needs nothing from outside the script; another test
      // is taken as false and listed.
      auto test = [&] {
        const std::vector<std::string> cond = condition_words(words, 1);
        const std::optional<bool> v = evaluate(cond);
        if (!v) {
          ex.listing(true);
          std::string written;
          for (const std::string& c : cond) written += (written.empty() ? "" : " ") + c;
          ex.note_unresolved(first + " " + written + " (taken as false)");
        }
        return v.value_or(false);
      };
      if (first == "if") {
        branches.open(branches.active() && test());
        continue;
      }
      if (first == "elif" || first == "else" || first == "fi") {
        if (!branches.any_open()) ex.fail(line, first + " without if");
        if (first == "elif") branches.elif (branches.elif_pending() && test());
        if (first == "fi") branches.close();
        if (first != "else") continue;
        branches.otherwise();
      }
      if (first == "then" || first == "else") words.erase(words.begin());  // the rest is the branch's first command
      if (words.empty()) continue;
      const bool active = branches.active();
      ex.listing(active);
      std::size_t w0 = Expander::joined(words[0]) == "export" ? 1 : 0;
      // An assignment: NAME=value (one word), NAME+=value, or NAME=( ... ) / NAME+=( ... ) up to the closing bracket,
      // over lines.
      if (w0 < words.size()) {
        const std::string head = Expander::joined(words[w0]);
        const std::size_t eq = head.find('=');
        const bool append = eq != std::string::npos && eq > 0 && head[eq - 1] == '+';
        const std::string name = eq == std::string::npos ? "" : head.substr(0, append ? eq - 1 : eq);
        if (eq != std::string::npos && is_name(name) && !words[w0].empty() && !words[w0][0].quoted) {
          const bool array = eq + 1 == head.size() && w0 + 1 < words.size() && Expander::joined(words[w0 + 1]) == "(";
          if (!array) {
            // The value: the first word less "NAME=" (no word splitting in an assignment).
            if (active) vars[name] = (append ? vars[name] : std::string()) + head.substr(eq + 1);
            continue;
          }
          std::vector<std::string> elems;
          std::size_t k = w0 + 2;
          std::size_t at = li;
          for (;;) {
            for (; k < words.size(); k++) {
              if (Expander::joined(words[k]) == ")") goto closed;
              for (std::string& f : Expander::fields(words[k])) elems.push_back(std::move(f));
            }
            if (++at >= lines.size()) ex.fail(line, "array " + name + "=( ... has no closing )");
            words = ex.words(lines[at].second, lines[at].first);
            k = 0;
          }
        closed:
          if (active) {
            std::vector<std::string>& a = arrays[name];
            if (!append) a.clear();
            a.insert(a.end(), elems.begin(), elems.end());
          }
          if (at == li) continue;  // closed on this line: its next command
          li = at;
          break;  // the rest of the array's last line is not read
        }
      }
      if (!active) continue;
      // A command: the one that runs pretrain_*.py.
      std::vector<std::string> f;
      for (const Word& w : words)
        for (std::string& x : Expander::fields(w)) f.push_back(std::move(x));
      const auto it = std::find_if(f.begin(), f.end(), is_pretrain);
      if (it == f.end()) continue;
      out.args.assign(it + 1, f.end());
      out.line = line;
      return out;
    }
  }
  throw std::invalid_argument(source + ": no line runs a pretrain_*.py script");
}

}  // namespace pipescope
