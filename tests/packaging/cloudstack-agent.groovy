// Runs the CloudStack transformer the way the CloudStack KVM agent does (LibvirtKvmAgentHook:
// a GroovyScriptEngine on agent.hooks.basedir, run(script, binding), then
// invokeMethod('transform', [logger, xml]) on the object the script evaluates to).
//
// usage: groovy cloudstack-agent.groovy HOOKS_DIR SCRIPT DOMAIN_XML REAL_BIN FAKE_DIR TIMEOUT
//   REAL_BIN   a working `virt-cpu-policy` (a wrapper that adds --policy)
//   FAKE_DIR   holds fake binaries: exit1 (prints to stderr, exits 1), sleep (sleeps 60 s)
// Prints one "ok"/"FAIL" line per check and "cloudstack: N passed, M failed"; exits 1 on failure.

import groovy.lang.Binding
import groovy.lang.GroovyObject
import groovy.util.GroovyScriptEngine

class RecordingLogger {
    List<String> lines = []
    void info(Object m) { lines << "INFO ${m}".toString() }
    void warn(Object m) { lines << "WARN ${m}".toString() }
    void error(Object m) { lines << "ERROR ${m}".toString() }
    void debug(Object m) { lines << "DEBUG ${m}".toString() }
    boolean warned(String s) { lines.any { it.startsWith('WARN') && it.contains(s) } }
}

def (hooksDir, scriptName, domainFile, realBin, fakeDir, timeoutArg) = args as List
String xml = new File(domainFile).getText('UTF-8')
int passed = 0
int failed = 0
def check = { String name, boolean ok, String detail = '' ->
    if (ok) {
        passed++
        println "ok   ${name}"
    } else {
        failed++
        println "FAIL ${name}${detail ? ': ' + detail : ''}"
    }
}

// LibvirtKvmAgentHook.handle(), as in CloudStack's agent.
GroovyScriptEngine gse = new GroovyScriptEngine(hooksDir)
def handle = { Object logger, String arg ->
    GroovyObject cls = (GroovyObject) gse.run(scriptName, new Binding())
    if (cls == null) {
        return arg
    }
    Object[] params = [logger, arg]
    return cls.invokeMethod('transform', params)
}

System.setProperty('virt.cpu.policy.timeout', timeoutArg)

// 1. The real binary: the rewritten XML reaches x86-64-v2, every other line is kept.
System.setProperty('virt.cpu.policy.bin', realBin)
def log1 = new RecordingLogger()
String out = handle(log1, xml)
check('rewrite: result differs from the input', out != null && out != xml)
check('rewrite: qemu64 written out', out?.contains('<model>qemu64</model>'))
['lahf_lm', 'popcnt', 'sse4.1', 'sse4.2', 'ssse3'].each { f ->
    check("rewrite: requires ${f}", out?.contains("<feature policy='require' name='${f}'/>"))
}
check('rewrite: topology kept', out?.contains("<topology sockets='1' cores='2' threads='1' />"))
check('rewrite: one <cpu>', out != null && out.count('<cpu>') == 1)
Process direct = new ProcessBuilder([realBin, 'rewrite', domainFile]).start()
String expected = direct.inputStream.getText('UTF-8')
direct.waitFor()
check('rewrite: byte-identical to `virt-cpu-policy rewrite` run directly', out == expected)
check('rewrite: nothing logged at warn', !log1.lines.any { it.startsWith('WARN') }, log1.lines.join(' | '))
check('rewrite: the password is never logged', !log1.lines.any { it.contains('s3cret') })

// 2. Idempotent: the agent may transform twice.
String out2 = handle(new RecordingLogger(), out)
check('rewrite: a second transform is byte-identical', out2 == out)

// 3. Binary missing.
System.setProperty('virt.cpu.policy.bin', new File(fakeDir, 'does-not-exist').path)
def log3 = new RecordingLogger()
String r3 = handle(log3, xml)
check('missing binary: original XML returned', r3 == xml)
check('missing binary: warning logged', log3.warned('missing'), log3.lines.join(' | '))

// 4. Exit status 1 (the domain cannot conform).
System.setProperty('virt.cpu.policy.bin', new File(fakeDir, 'exit1').path)
def log4 = new RecordingLogger()
String r4 = handle(log4, xml)
check('exit 1: original XML returned', r4 == xml)
check('exit 1: warning with status and stderr', log4.warned('status 1') && log4.warned('cannot conform'), log4.lines.join(' | '))

// 5. Timeout: a binary that sleeps is killed; the original comes back within timeout + margin.
System.setProperty('virt.cpu.policy.bin', new File(fakeDir, 'sleep').path)
def log5 = new RecordingLogger()
long t0 = System.nanoTime()
String r5 = handle(log5, xml)
double secs = (System.nanoTime() - t0) / 1e9
int limit = Integer.parseInt(timeoutArg)
check('timeout: original XML returned', r5 == xml)
check("timeout: returned within ${limit} s + 5 s (took ${String.format('%.1f', secs)} s)", secs >= limit - 0.5 && secs < limit + 5)
check('timeout: warning logged', log5.warned('killed'), log5.lines.join(' | '))

// 6. A logger that throws (or none at all) never breaks the transform.
System.setProperty('virt.cpu.policy.bin', new File(fakeDir, 'exit1').path)
def badLogger = new Object() { void warn(Object m) { throw new RuntimeException('logger broken') } }
check('throwing logger: original XML returned', handle(badLogger, xml) == xml)
check('null logger: original XML returned', handle(null, xml) == xml)

// 7. Null XML is passed back.
System.setProperty('virt.cpu.policy.bin', realBin)
check('null XML: null returned', handle(new RecordingLogger(), null) == null)

println "cloudstack: ${passed} passed, ${failed} failed"
System.exit(failed == 0 ? 0 : 1)
