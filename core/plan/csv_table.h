#pragma once
// CSV files of measured runs (core/plan/measured_runs.h, core/plan/dev_sets.h): records whose cells are named by
// the header line, RFC 4180 quoting (commas inside double quotes, "" for a quote), and cell readers whose errors
// name the file, the line and the column.

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pipescope {

// One record of a CSV file.
struct CsvRecord {
  std::string source;                                             // the file (messages)
  int line = 0;                                                   // its line in the file (messages)
  std::shared_ptr<const std::map<std::string, std::size_t>> col;  // header name -> cell index
  std::vector<std::string> cells;

  // Throws std::invalid_argument "<source>:<line>: column <column>: <what>".
  [[noreturn]] void fail(const std::string& column, const std::string& what) const;
  bool has(const std::string& name) const { return col->count(name) > 0; }
  // The cell; a column the header lacks is "<source>:1: missing column '<name>'".
  const std::string& text(const std::string& name) const;
  // A positive integer; an empty cell is `fallback` when that is >= 0 (0: "not given", filled later), else an error.
  int integer(const std::string& name, int fallback = -1) const;
  // A positive finite number.
  double number(const std::string& name) const;
};

// The records of a CSV text (empty lines skipped). Throws std::invalid_argument on an empty text or one without
// records.
std::vector<CsvRecord> parse_csv_records(const std::string& csv_text, const std::string& source);
std::vector<CsvRecord> read_csv_records(const std::string& path);

}  // namespace pipescope
