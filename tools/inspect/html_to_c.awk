# report.html -> two C string constants, the page before and after its <!--DATA--> line.
BEGIN { print "/* generated from tools/inspect/report.html by html_to_c.awk */"; print "static const char report_html_head[] ="; part = 0 }
/^<!--DATA-->$/ { print ";"; print "static const char report_html_tail[] ="; part = 1; next }
{ gsub(/\\/, "&&"); gsub(/"/, "\\\""); gsub(/\?\?/, "?\\?"); print "\"" $0 "\\n\"" }
END { print ";"; if (!part) { print "#error report.html has no <!--DATA--> line" } }
