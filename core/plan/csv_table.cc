#include "core/plan/csv_table.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "core/util/input_file.h"

namespace pipescope {
namespace {

// RFC 4180 cells of one record: commas separate, double quotes enclose (a doubled quote is one quote).
std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); i++) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        i++;
      } else if (ch == '"') {
        quoted = false;
      } else {
        cells.back() += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      cells.emplace_back();
    } else if (ch != '\r') {
      cells.back() += ch;
    }
  }
  return cells;
}

}  // namespace

void CsvRecord::fail(const std::string& column, const std::string& what) const {
  throw std::invalid_argument(source + ":" + std::to_string(line) + ": column " + column + ": " + what);
}

const std::string& CsvRecord::text(const std::string& name) const {
  const auto it = col->find(name);
  if (it == col->end()) throw std::invalid_argument(source + ":1: missing column '" + name + "'");
  if (it->second >= cells.size()) fail(name, "row has only " + std::to_string(cells.size()) + " cells");
  return cells[it->second];
}

int CsvRecord::integer(const std::string& name, int fallback) const {
  const std::string& t = text(name);
  if (t.empty()) {
    if (fallback >= 0) return fallback;
    fail(name, "empty");
  }
  std::size_t used = 0;
  long v = 0;
  try {
    v = std::stol(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != t.size() || v < 1 || v > 1000000000L) fail(name, "expected a positive integer, got \"" + t + "\"");
  return static_cast<int>(v);
}

double CsvRecord::number(const std::string& name) const {
  const std::string& t = text(name);
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != t.size() || !(v > 0) || !std::isfinite(v)) fail(name, "expected a positive number, got \"" + t + "\"");
  return v;
}

std::vector<CsvRecord> parse_csv_records(const std::string& csv_text, const std::string& source) {
  std::istringstream in(csv_text);
  std::string line;
  if (!std::getline(in, line)) throw std::invalid_argument(source + ": empty file (expected a header line)");
  auto col = std::make_shared<std::map<std::string, std::size_t>>();
  const std::vector<std::string> header = split_csv_line(line);
  for (std::size_t i = 0; i < header.size(); i++) (*col)[header[i]] = i;
  std::vector<CsvRecord> out;
  int number = 1;
  while (std::getline(in, line)) {
    number++;
    if (line.empty() || line == "\r") continue;
    out.push_back(CsvRecord{source, number, col, split_csv_line(line)});
  }
  if (out.empty()) throw std::invalid_argument(source + ": no rows");
  return out;
}

std::vector<CsvRecord> read_csv_records(const std::string& path) {
  // The input-file rules (core/util/input_file.h): a regular file of at most 16 MiB (/dev/zero never ends).
  try {
    return parse_csv_records(read_input_file(path, "CSV file"), path);
  } catch (const InputFileError& e) {
    throw std::invalid_argument(e.what());
  }
}

}  // namespace pipescope
