// LoadCsv with CsvOptions: delimiters, column selection, quoting, missing values.
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fl/client/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fl::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WriteCsv(const std::string& contents) {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string path = testing::TempDir() + "/csv_test_" + info->name() + ".csv";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  return path;
}

CsvOptions Options(char delimiter = ',') {
  CsvOptions o;
  o.delimiter = delimiter;
  return o;
}

// Loads `contents` with `o` and returns the INVALID_ARGUMENT message (which must name the file).
std::string Refusal(const std::string& contents, const CsvOptions& o) {
  const std::string path = WriteCsv(contents);
  absl::StatusOr<Dataset> d = LoadCsv(path, o);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << d.status();
  EXPECT_THAT(d.status().message(), HasSubstr(path));
  return std::string(d.status().message());
}

TEST(CsvTest, SemicolonTabAndPipeDelimiters) {
  for (char delimiter : {';', '\t', '|'}) {
    SCOPED_TRACE(std::string(1, delimiter));
    const std::string d(1, delimiter);
    absl::StatusOr<Dataset> data = LoadCsv(
        WriteCsv("age" + d + "label" + d + "bmi\n51" + d + "1" + d + "22.5\n"), Options(delimiter));
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_THAT(data->feature_names, ElementsAre("age", "bmi"));
    EXPECT_THAT(data->features, ElementsAre(51.0f, 22.5f));
    EXPECT_THAT(data->labels, ElementsAre(1));
  }
}

TEST(CsvTest, UnusableDelimitersAreRefused) {
  for (char delimiter : {'"', '\n', '\r', '\0', ' ', '7', 'x', '.', '-', '+'}) {
    SCOPED_TRACE(static_cast<int>(delimiter));
    EXPECT_THAT(Refusal("a,label\n1,0\n", Options(delimiter)),
                HasSubstr("cannot separate CSV fields"));
    EXPECT_EQ(ValidateCsvOptions(Options(delimiter)).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(ValidateCsvOptions(Options('\t')).ok());
}

TEST(CsvTest, AOneColumnHeaderHintsAtTheDelimiter) {
  EXPECT_THAT(Refusal("age;bmi;label\n51;22;1\n", Options()),
              HasSubstr(": row 1: the header has 1 column; it looks ';'-separated: set "
                        "data.delimiter"));
  EXPECT_THAT(Refusal("age\tbmi\tlabel\n51\t22\t1\n", Options()),
              HasSubstr("has 1 column; it looks '\\t'-separated"));
  EXPECT_THAT(Refusal("age,bmi,label\n51,22,1\n", Options(';')),
              HasSubstr("has 1 column; it looks ','-separated"));
  // Without another delimiter in sight, the usual refusal.
  EXPECT_THAT(Refusal("label\n1\n", Options()), HasSubstr("no feature columns"));
}

TEST(CsvTest, DropColumnsAreNeverReadOrUsed) {
  CsvOptions o;
  o.drop_columns = {"patient_id", "note"};
  absl::StatusOr<Dataset> d =
      LoadCsv(WriteCsv("patient_id,age,note,label\nP-001,51,ok,1\n17,60,,0\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_features, 1);
  EXPECT_THAT(d->feature_names, ElementsAre("age"));
  EXPECT_THAT(d->features, ElementsAre(51.0f, 60.0f));
}

TEST(CsvTest, FeatureColumnsChooseAndOrderTheFeatures) {
  CsvOptions o;
  o.feature_columns = {"bmi", "age"};
  absl::StatusOr<Dataset> d =
      LoadCsv(WriteCsv("id,age,label,bmi,site\nx,51,1,22.5,north\ny,60,0,30,south\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->feature_names, ElementsAre("bmi", "age"));
  EXPECT_THAT(d->features, ElementsAre(22.5f, 51.0f, 30.0f, 60.0f));
  EXPECT_THAT(d->labels, ElementsAre(1, 0));
}

TEST(CsvTest, AKeyColumnIsKeptAsTextPerRowAndIsNeverAFeature) {
  CsvOptions o;
  o.key_column = "hospital";
  absl::StatusOr<Dataset> d =
      LoadCsv(WriteCsv("hospital,age,label\n\"St. Mary's, North\",51,1\nH2,60,0\nH2,70,1\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->feature_names, ElementsAre("age"));
  EXPECT_THAT(d->keys, ElementsAre("St. Mary's, North", "H2", "H2"));
  // A subset keeps each row's key with it.
  EXPECT_THAT(d->Subset({2, 0}).keys, ElementsAre("H2", "St. Mary's, North"));
}

TEST(CsvTest, AKeyColumnMustExistAndEveryRowNeedsAKey) {
  CsvOptions o;
  o.key_column = "site";
  EXPECT_THAT(Refusal("age,label\n51,1\n", o), HasSubstr("no key column named 'site'"));
  EXPECT_THAT(Refusal("site,age,label\nA,51,1\n,60,0\n", o),
              HasSubstr("row 3, column 'site': the key is missing"));
  // Dropping rows with a missing value drops a row without a key too.
  o.missing_values = MissingValues::kDropRow;
  absl::StatusOr<Dataset> d = LoadCsv(WriteCsv("site,age,label\nA,51,1\nNA,60,0\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->keys, ElementsAre("A"));
  EXPECT_EQ(d->dropped_rows, 1);
  // The key can be neither the label nor a chosen feature.
  CsvOptions label_key;
  label_key.key_column = "label";
  EXPECT_THAT(Refusal("age,label\n51,1\n", label_key), HasSubstr("is also the label column"));
  CsvOptions feature_key;
  feature_key.key_column = "age";
  feature_key.feature_columns = {"age"};
  EXPECT_THAT(Refusal("age,label\n51,1\n", feature_key), HasSubstr("is also a feature column"));
}

TEST(CsvTest, ColumnsNotInTheHeaderAreRefusedByName) {
  CsvOptions o;
  o.drop_columns = {"patient_idx"};
  EXPECT_THAT(Refusal("patient_id,age,label\n1,2,0\n", o),
              HasSubstr(": row 1: drop_columns names 'patient_idx', which is not in the header "
                        "(columns: patient_id, age, label)"));
  o = CsvOptions();
  o.feature_columns = {"age", "weight"};
  EXPECT_THAT(Refusal("patient_id,age,label\n1,2,0\n", o),
              HasSubstr("feature_columns names 'weight', which is not in the header (columns: "
                        "patient_id, age, label)"));
}

TEST(CsvTest, OptionsThatCannotGoTogetherAreRefused) {
  const std::string file = "a,b,label\n1,2,0\n";
  CsvOptions o;
  o.drop_columns = {"label"};
  EXPECT_THAT(Refusal(file, o), HasSubstr("drop_columns names the label column 'label'"));
  o = CsvOptions();
  o.feature_columns = {"a", "label"};
  EXPECT_THAT(Refusal(file, o), HasSubstr("feature_columns names the label column 'label'"));
  o.feature_columns = {"a", "b", "a"};
  EXPECT_THAT(Refusal(file, o), HasSubstr("feature_columns names 'a' twice"));
  o.feature_columns = {"a", "b"};
  o.drop_columns = {"b"};
  EXPECT_THAT(Refusal(file, o), HasSubstr("feature_columns and drop_columns both name 'b'"));
  o = CsvOptions();
  o.label_column = "";
  EXPECT_THAT(Refusal(file, o), HasSubstr("label_column must not be empty"));
  o = CsvOptions();
  o.missing_values = MissingValues::kImpute;
  o.impute_value = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(Refusal(file, o), HasSubstr("impute_value must be finite"));
}

TEST(CsvTest, HeaderNamesMustBeUsableForFeatures) {
  EXPECT_THAT(Refusal("a,b,a,label\n1,2,3,0\n", CsvOptions()),
              HasSubstr("row 1: column 'a' appears twice in the header (columns 1 and 3)"));
  EXPECT_THAT(Refusal(",age,label\n0,51,1\n", CsvOptions()),
              HasSubstr("row 1: column 1 has no name (a row index?)"));
  // A duplicated or unnamed column that is dropped or not selected is no problem.
  CsvOptions o;
  o.drop_columns = {"", "a"};
  absl::StatusOr<Dataset> d = LoadCsv(WriteCsv(",a,b,a,label\n0,1,2,3,0\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->feature_names, ElementsAre("b"));
  o = CsvOptions();
  o.feature_columns = {"a"};
  EXPECT_THAT(Refusal("a,b,a,label\n1,2,3,0\n", o), HasSubstr("'a' appears twice"));
}

TEST(CsvTest, QuotedFieldsHoldDelimitersQuotesAndLineBreaks) {
  CsvOptions o;
  o.drop_columns = {"name"};
  absl::StatusOr<Dataset> d = LoadCsv(WriteCsv("name, \"weight, kg\" ,\"say \"\"hi\"\"\",label\n"
                                               "\"Smith, John\",\"80.5\",1,0\n"
                                               "\"two\nlines \"\"quoted\"\"\",70,2,1\n"),
                                      o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->feature_names, ElementsAre("weight, kg", "say \"hi\""));
  EXPECT_THAT(d->features, ElementsAre(80.5f, 1.0f, 70.0f, 2.0f));
  EXPECT_THAT(d->labels, ElementsAre(0, 1));

  // Rows are the lines where records start: the record of lines 2-3 is row 2, the next row 4.
  o.drop_columns = {"note"};
  EXPECT_THAT(Refusal("note,a,label\n\"x\ny\",1,0\nz,oops,1\n", o),
              HasSubstr(": row 4, column 'a': not a number: 'oops'"));
  EXPECT_THAT(Refusal("a,label\n1,0\n\"2,1\n3,0\n", CsvOptions()),
              HasSubstr(": row 3: a double quote opens a field that is not closed"));
  EXPECT_THAT(Refusal("a,b,label\n\"1\"x,2,0\n", CsvOptions()),
              HasSubstr(": row 2: field 1: text after the closing quote: 'x'"));
  // A tab-separated file may quote a tab.
  o = Options('\t');
  o.drop_columns = {"text"};
  d = LoadCsv(WriteCsv("text\ta\tlabel\n\"x\ty\"\t 5 \t1\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->features, ElementsAre(5.0f));
}

TEST(CsvTest, ByteOrderMarkCrlfAndTrailingEmptyLines) {
  absl::StatusOr<Dataset> d =
      LoadCsv(WriteCsv("\xEF\xBB\xBF\"age\",label\r\n51,1\r\n60,0\r\n\r\n  \r\n\n"), CsvOptions());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->feature_names, ElementsAre("age"));
  EXPECT_THAT(d->features, ElementsAre(51.0f, 60.0f));
  EXPECT_THAT(d->labels, ElementsAre(1, 0));
}

constexpr char kMissing[] =
    "a,b,label\n"
    "1,2,0\n"
    "NA,3,1\n"
    "4,,0\n"
    "5,n/a,1\n"
    "NaN,null,0\n"
    "?, \"\" ,1\n"
    "8,9,2\n";

TEST(CsvTest, MissingValuesAreRefusedByDefault) {
  EXPECT_THAT(Refusal(kMissing, CsvOptions()),
              HasSubstr(": row 3, column 'a': missing value 'NA' is refused: missing_values = "
                        "drop_row skips such rows, impute replaces the value"));
  EXPECT_THAT(Refusal("a,label\n1,0\n,1\n", CsvOptions()),
              HasSubstr("row 3, column 'a': empty value is refused"));
}

TEST(CsvTest, MissingValuesDropTheirRows) {
  CsvOptions o;
  o.missing_values = MissingValues::kDropRow;
  absl::StatusOr<Dataset> d = LoadCsv(WriteCsv(kMissing), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->dropped_rows, 5);
  EXPECT_EQ(d->imputed_values, 0);
  EXPECT_THAT(d->features, ElementsAre(1.0f, 2.0f, 8.0f, 9.0f));
  EXPECT_THAT(d->labels, ElementsAre(0, 2));
  EXPECT_EQ(d->num_classes, 3);
  // A missing label drops the row too; values that are not missing are still checked.
  d = LoadCsv(WriteCsv("a,label\n1,0\n2,NA\n3,1\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->dropped_rows, 1);
  EXPECT_THAT(d->labels, ElementsAre(0, 1));
  EXPECT_THAT(Refusal("a,b,label\n,x,0\n", o), HasSubstr("row 2, column 'b': not a number: 'x'"));
  EXPECT_THAT(Refusal("a,label\n1,0\n-inf,1\n", o), HasSubstr("infinity is not allowed"));
  EXPECT_THAT(Refusal("a,label\nNA,0\n,1\n", o),
              HasSubstr("no data rows left: all 2 rows have a missing value and were dropped"));
}

TEST(CsvTest, MissingFeaturesAreImputedButLabelsNever) {
  CsvOptions o;
  o.missing_values = MissingValues::kImpute;
  o.impute_value = -1;
  absl::StatusOr<Dataset> d = LoadCsv(WriteCsv(kMissing), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->dropped_rows, 0);
  EXPECT_EQ(d->imputed_values, 7);
  EXPECT_THAT(d->features, ElementsAre(1, 2, -1, 3, 4, -1, 5, -1, -1, -1, -1, -1, 8, 9));
  EXPECT_THAT(Refusal("a,label\n1,0\n2,null\n", o),
              HasSubstr("row 3, column 'label': missing value 'null' in the label column: a "
                        "class is never imputed"));
}

TEST(CsvTest, NumClassesBindsTheLabels) {
  CsvOptions o;
  o.num_classes = 2;
  EXPECT_THAT(Refusal("a,label\n1,0\n2,2\n", o),
              HasSubstr("row 3, column 'label': label 2 is outside the model's 2 classes"));
  o.num_classes = 5;
  absl::StatusOr<Dataset> d = LoadCsv(WriteCsv("a,label\n1,0\n2,2\n"), o);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_classes, 5);
}

}  // namespace
}  // namespace fl::client
